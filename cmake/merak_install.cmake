# Install and export rules: `cmake --install build --prefix P` installs
#
#   P/bin/merak                          the command-line program (runs `svm`)
#   P/bin/merak-full                     every other sub-command (merak execs it)
#   P/include/merak/<folder>/*.hpp       headers, in the source tree's layout
#   P/lib/libmerak_*.a                   the static libraries
#   P/lib/cmake/merak/                   the CMake package (find_package(merak))
#
# An outside project then writes
#
#   find_package(merak REQUIRED)
#   target_link_libraries(app PRIVATE merak::merak)   # or merak::model, ...
#
# and includes headers as the tree does: #include "model/gpt.hpp"
# (the package's include directory is P/include/merak).
#
# Included from the root CMakeLists.txt after every library is defined.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MERAK_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/merak
    CACHE STRING "Where the merak CMake package is installed (relative to the prefix)")
set(MERAK_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/merak)

# Library folder -> exported name (merak::<name>). merak_warnings is the
# build's own flags: the static libraries carry it as a link-only dependency
# (it adds the sanitizer's link flags in a MERAK_SANITIZE build), so it is
# exported too, as merak::warnings.
set(_merak_export_libs core model comm job partition svm actors bench)
if(TARGET merak_gpu)
  list(APPEND _merak_export_libs gpu)
endif()

set(_merak_export_targets merak_warnings)
foreach(lib ${_merak_export_libs})
  if(NOT TARGET merak_${lib})
    continue()  # comm/ before its sources landed
  endif()
  list(APPEND _merak_export_targets merak_${lib})
  set_target_properties(merak_${lib} PROPERTIES EXPORT_NAME ${lib})
  # The same names inside the tree, so an example builds either way.
  if(NOT TARGET merak::${lib})
    add_library(merak::${lib} ALIAS merak_${lib})
  endif()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${lib}/
          DESTINATION ${MERAK_INSTALL_INCLUDEDIR}/${lib}
          COMPONENT merak_dev
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
endforeach()
set_target_properties(merak_warnings PROPERTIES EXPORT_NAME warnings)
# The codec benchmark (bench/codec_bench.hpp, installed with bench/), a
# link dependency of merak::bench.
list(APPEND _merak_export_targets merak_codec_bench)
set_target_properties(merak_codec_bench PROPERTIES EXPORT_NAME codec_bench)
if(NOT TARGET merak::codec_bench)
  add_library(merak::codec_bench ALIAS merak_codec_bench)
endif()

# The headers are C++20; users get the standard from the targets.
set_property(TARGET merak_core APPEND PROPERTY INTERFACE_COMPILE_FEATURES cxx_std_20)

# Eigen types cross the svm/ interface (dataset, linear_model), and Eigen's
# heap alignment depends on the instruction set: the library, built with
# -march=native (MERAK_NATIVE) on an AVX-512 machine, allocates 64-byte
# aligned blocks that a program compiled without it would free as 16-byte
# ones (a crash). Likewise a sanitizer build makes Eigen stop trusting
# malloc's alignment (it then allocates with its own offset blocks, which a
# program compiled without the sanitizer would free directly). The package
# pins the program's Eigen alignment and allocator choice to the library's,
# read here from the preprocessor under the library's flags.
function(merak_eigen_alignment out_max out_static out_malloc)
  get_target_property(_eigen_inc Eigen3::Eigen INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(_opts merak_warnings INTERFACE_COMPILE_OPTIONS)
  if(NOT _opts)
    set(_opts "")
  endif()
  # The C++ flags, out of their language guard (nvcc gets none of them).
  string(REGEX REPLACE "\\$<\\$<COMPILE_LANGUAGE:CXX>:([^>]*)>" "\\1" _opts "${_opts}")
  string(TOUPPER "${CMAKE_BUILD_TYPE}" _cfg)
  separate_arguments(_flags UNIX_COMMAND "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${_cfg}}")
  set(_src ${PROJECT_BINARY_DIR}/cmake/merak_eigen_align.cpp)
  file(WRITE ${_src} "#include <Eigen/Core>\nmerak_align EIGEN_MAX_ALIGN_BYTES EIGEN_MAX_STATIC_ALIGN_BYTES EIGEN_MALLOC_ALREADY_ALIGNED\n")
  set(_inc "")
  foreach(d ${_eigen_inc})
    list(APPEND _inc -I${d})
  endforeach()
  execute_process(
    COMMAND ${CMAKE_CXX_COMPILER} ${_flags} ${_opts} -std=c++20 ${_inc} -E -P ${_src}
    OUTPUT_VARIABLE _pp ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _pp MATCHES "merak_align ([0-9]+) ([0-9]+) ([0-9]+)")
    set(${out_max} ${CMAKE_MATCH_1} PARENT_SCOPE)
    set(${out_static} ${CMAKE_MATCH_2} PARENT_SCOPE)
    set(${out_malloc} ${CMAKE_MATCH_3} PARENT_SCOPE)
  else()
    message(WARNING "merak: could not read Eigen's alignment: programs using the installed merak::svm must match the library's -march")
    set(${out_max} "" PARENT_SCOPE)
    set(${out_static} "" PARENT_SCOPE)
    set(${out_malloc} "" PARENT_SCOPE)
  endif()
endfunction()
merak_eigen_alignment(MERAK_EIGEN_MAX_ALIGN MERAK_EIGEN_STATIC_ALIGN MERAK_EIGEN_MALLOC_ALIGNED)
if(MERAK_EIGEN_MAX_ALIGN)
  set_property(TARGET merak_svm APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS
               $<INSTALL_INTERFACE:EIGEN_MAX_ALIGN_BYTES=${MERAK_EIGEN_MAX_ALIGN}>
               $<INSTALL_INTERFACE:EIGEN_MAX_STATIC_ALIGN_BYTES=${MERAK_EIGEN_STATIC_ALIGN}>
               $<INSTALL_INTERFACE:EIGEN_MALLOC_ALREADY_ALIGNED=${MERAK_EIGEN_MALLOC_ALIGNED}>)
endif()

# merak::merak: everything a program needs to train or fit (the actor
# runtime pulls in model, partition, svm, comm, job and core). merak::gpu (the
# CUDA device query) stays out of it: a program links it by name.
add_library(merak_all INTERFACE)
set_target_properties(merak_all PROPERTIES EXPORT_NAME merak)
target_link_libraries(merak_all INTERFACE merak_actors)
if(NOT TARGET merak::merak)
  add_library(merak::merak ALIAS merak_all)
endif()
list(APPEND _merak_export_targets merak_all)

install(TARGETS ${_merak_export_targets}
        EXPORT merakTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT merak_dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT merak_dev
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT merak_dev
        INCLUDES DESTINATION ${MERAK_INSTALL_INCLUDEDIR})
install(TARGETS merak merak_full RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT merak_bin)
if(TARGET merak_cuda)  # loaded by merak-full on --device cuda (apps/device_flag.cpp)
  install(TARGETS merak_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/merak COMPONENT merak_bin)
endif()

install(EXPORT merakTargets
        NAMESPACE merak::
        DESTINATION ${MERAK_INSTALL_CMAKEDIR}
        COMPONENT merak_dev)

# What the package's config must find again: every target named in the
# exported link interfaces (a static library's private dependencies are
# link-only entries of its interface, so they count too).
set(MERAK_PACKAGE_WITH_DNNL OFF)
if("onednn" IN_LIST MERAK_GEMM_BACKENDS)
  set(MERAK_PACKAGE_WITH_DNNL ON)
endif()
set(MERAK_PACKAGE_WITH_UCX OFF)
if(MERAK_WITH_UCX AND ucx_FOUND AND TARGET merak_comm)
  set(MERAK_PACKAGE_WITH_UCX ON)
endif()
set(MERAK_PACKAGE_WITH_CUDA OFF)
if(TARGET merak_gpu)
  set(MERAK_PACKAGE_WITH_CUDA ON)
endif()

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/merakConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/merakConfig.cmake
  INSTALL_DESTINATION ${MERAK_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cmake/merakConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)  # 0.x: a minor release may break the API
install(FILES
          ${PROJECT_BINARY_DIR}/cmake/merakConfig.cmake
          ${PROJECT_BINARY_DIR}/cmake/merakConfigVersion.cmake
          ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${MERAK_INSTALL_CMAKEDIR}
        COMPONENT merak_dev)
