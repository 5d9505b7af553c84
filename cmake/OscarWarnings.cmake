# Warning flags for the project's own targets (third-party headers come in as SYSTEM includes).
function(oscar_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${OSCAR_WERROR}>>:-Werror>)
endfunction()
