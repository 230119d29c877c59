# Install and export rules: `find_package(bellows)` then `target_link_libraries(app bellows::bellows)`.
include(CMakePackageConfigHelpers)
install(TARGETS bellows EXPORT bellowsTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS bellows_sentencepiece LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})  # opened by libbellows from its own folder
set(bellows_header_excludes PATTERN "*.in" EXCLUDE)
if(NOT TARGET bellows_c_mpi)
  list(APPEND bellows_header_excludes PATTERN "bellows_c_mpi.h" EXCLUDE)  # no library behind it
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/bellows DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${bellows_header_excludes})
install(TARGETS bellows_c EXPORT bellowsTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET bellows_fortran)
  install(TARGETS bellows_fortran EXPORT bellowsTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  # The module bellows and the modules it uses (bellows.f90 says in which order to compile the sources).
  foreach(_module bellows_c_binding bellows_c_conversions bellows_c_calls bellows)
    install(FILES ${PROJECT_BINARY_DIR}/fortran/${_module}.mod ${PROJECT_SOURCE_DIR}/src/capi/fortran/${_module}.f90
      DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/bellows/fortran)
  endforeach()
endif()
# The MPI layer in export sets of its own, which bellowsConfig.cmake loads only where the consumer finds MPI: a
# project without MPI still finds bellows.
if(TARGET bellows_c_mpi)
  install(TARGETS bellows_c_mpi EXPORT bellowsMpiTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT bellowsMpiTargets NAMESPACE bellows:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bellows)
endif()
if(TARGET bellows_fortran_mpi)
  install(TARGETS bellows_fortran_mpi EXPORT bellowsFortranMpiTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT bellowsFortranMpiTargets NAMESPACE bellows:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bellows)
  install(FILES ${PROJECT_BINARY_DIR}/fortran/bellows_mpi.mod ${PROJECT_SOURCE_DIR}/src/capi/fortran/bellows_mpi.f90
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/bellows/fortran)
endif()
# pkg-config: bellows (the C API), bellows-fortran, and where MPI was found bellows-mpi and bellows-fortran-mpi, twice. The installed files are relocatable (paths from the
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
if(TARGET bellows_c_mpi)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/bellows-mpi.pc.in ${PROJECT_BINARY_DIR}/pkgconfig-install/bellows-mpi.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig-install/bellows-mpi.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
if(TARGET bellows_fortran_mpi)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/bellows-fortran-mpi.pc.in ${PROJECT_BINARY_DIR}/pkgconfig-install/bellows-fortran-mpi.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig-install/bellows-fortran-mpi.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
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
if(TARGET bellows_c_mpi)
  set(BELLOWS_PC_LIBDIR "$<TARGET_FILE_DIR:bellows_c_mpi>")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/bellows-mpi.pc.in ${PROJECT_BINARY_DIR}/pkgconfig-build/bellows-mpi.pc.in @ONLY)
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/pkgconfig/bellows-mpi.pc INPUT ${PROJECT_BINARY_DIR}/pkgconfig-build/bellows-mpi.pc.in)
endif()
if(TARGET bellows_fortran_mpi)
  set(BELLOWS_PC_LIBDIR "$<TARGET_FILE_DIR:bellows_fortran_mpi>")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/bellows-fortran-mpi.pc.in ${PROJECT_BINARY_DIR}/pkgconfig-build/bellows-fortran-mpi.pc.in @ONLY)
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/pkgconfig/bellows-fortran-mpi.pc INPUT ${PROJECT_BINARY_DIR}/pkgconfig-build/bellows-fortran-mpi.pc.in)
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
