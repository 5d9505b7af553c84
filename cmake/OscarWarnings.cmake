# Warning flags for the project's own targets (third-party headers come in as SYSTEM includes).
function(oscar_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${OSCAR_WERROR}>>:-Werror>)
  # GCC 13's -Wdangling-reference flags every function that returns a reference into its first
  # argument when another argument is a temporary (e.g. a field lookup that takes a message
  # string); GCC 14 narrowed it. Those are false positives here.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-dangling-reference>)
  endif()
endfunction()
