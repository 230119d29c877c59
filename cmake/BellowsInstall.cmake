# Install and export rules: `find_package(bellows)` then `target_link_libraries(app bellows::bellows)`.
include(CMakePackageConfigHelpers)
install(TARGETS bellows EXPORT bellowsTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/bellows DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN "*.in" EXCLUDE)
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
