# Install and export rules: `find_package(bellows)` then `target_link_libraries(app bellows::bellows)`.
include(CMakePackageConfigHelpers)
install(TARGETS bellows EXPORT bellowsTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS bellows_sentencepiece LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})  # opened by libbellows from its own folder
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/bellows DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN "*.in" EXCLUDE)
install(TARGETS bellows_c EXPORT bellowsTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET bellows_fortran)
  install(TARGETS bellows_fortran EXPORT bellowsTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(FILES ${PROJECT_BINARY_DIR}/fortran/bellows.mod ${PROJECT_SOURCE_DIR}/src/capi/fortran/bellows.f90
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/bellows/fortran)
endif()
# pkg-config: bellows (the C API) and bellows-fortran, twice. The installed files are relocatable (paths from the
# .pc file's own place); the build tree's, in <build>/pkgconfig, name the build's libraries and the source headers
# by absolute path (PKG_CONFIG_PATH=<build>/pkgconfig pkg-config --libs bellows links against the build).
set(BELLOWS_PC_PREFIX "\${pcfiledir}/../..")
set(BELLOWS_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
set(BELLOWS_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
set(BELLOWS_PC_MODULEDIR "\${includedir}/bellows/fortran")
configure_file(${PROJECT_SOURCE_DIR}/cmake/bellows.pc.in ${PROJECT_BINARY_DIR}/pkgconfig-install/bellows.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/pkgconfig-install/bellows.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(TARGET bellows_fortran)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/bellows-fortran.pc.in ${PROJECT_BINARY_DIR}/pkgconfig-install/bellows-fortran.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig-install/bellows-fortran.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
set(BELLOWS_PC_PREFIX "${PROJECT_BINARY_DIR}")
set(BELLOWS_PC_LIBDIR "$<TARGET_FILE_DIR:bellows_c>")
set(BELLOWS_PC_INCLUDEDIR "${PROJECT_SOURCE_DIR}/include")
configure_file(${PROJECT_SOURCE_DIR}/cmake/bellows.pc.in ${PROJECT_BINARY_DIR}/pkgconfig-build/bellows.pc.in @ONLY)
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/pkgconfig/bellows.pc INPUT ${PROJECT_BINARY_DIR}/pkgconfig-build/bellows.pc.in)
if(TARGET bellows_fortran)
  set(BELLOWS_PC_LIBDIR "$<TARGET_FILE_DIR:bellows_fortran>")
  set(BELLOWS_PC_MODULEDIR "${PROJECT_BINARY_DIR}/fortran")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/bellows-fortran.pc.in ${PROJECT_BINARY_DIR}/pkgconfig-build/bellows-fortran.pc.in @ONLY)
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/pkgconfig/bellows-fortran.pc INPUT ${PROJECT_BINARY_DIR}/pkgconfig-build/bellows-fortran.pc.in)
endif()
if(TARGET bellows_cli)
  install(TARGETS bellows_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT bellowsTargets NAMESPACE bellows:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bellows)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/bellowsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/bellowsConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bellows)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/bellowsConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/bellowsConfig.cmake ${PROJECT_BINARY_DIR}/bellowsConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/BellowsTorchRuntime.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bellows)
