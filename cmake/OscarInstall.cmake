# Install rules: what serving engines build against. Only the Torch-free runtime library
# (oscar_runtime), its two public headers, the CMake package `oscar` (imported target
# oscar::runtime) and the pkg-config file `oscar-runtime.pc`; nothing of LibTorch or CUDA.
# Components: `runtime` (the shared library) and `devel` (headers, link name, package files).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(OSCAR_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/oscar)

install(TARGETS oscar_runtime EXPORT oscarTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT devel
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/lib/include/oscar/oscar_runtime.h
              ${PROJECT_SOURCE_DIR}/lib/include/oscar/runtime.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/oscar COMPONENT devel)

install(EXPORT oscarTargets NAMESPACE oscar:: DESTINATION ${OSCAR_INSTALL_CMAKEDIR}
        COMPONENT devel)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/oscarConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/oscarConfig.cmake INSTALL_DESTINATION ${OSCAR_INSTALL_CMAKEDIR})
# 0.x: minor versions may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/oscarConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/oscarConfig.cmake
              ${CMAKE_BINARY_DIR}/package/oscarConfigVersion.cmake
        DESTINATION ${OSCAR_INSTALL_CMAKEDIR} COMPONENT devel)

# pkg-config: paths relative to the .pc file, so the installed tree can be moved.
set(OSCAR_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${OSCAR_PC_DIR}")
  set(OSCAR_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH oscar_pc_up /prefix/${OSCAR_PC_DIR} /prefix)
  string(REGEX REPLACE "/$" "" oscar_pc_up "${oscar_pc_up}")
  set(OSCAR_PC_PREFIX "\${pcfiledir}/${oscar_pc_up}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/oscar-runtime.pc.in
               ${CMAKE_BINARY_DIR}/package/oscar-runtime.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/oscar-runtime.pc DESTINATION ${OSCAR_PC_DIR}
        COMPONENT devel)
