# FindCAF: locates the C++ Actor Framework 0.17 as shipped by Debian's
# libcaf-dev, which installs neither a CMake config nor a pkg-config file.
#
# Provides the imported targets CAF::core, CAF::io and CAF::openssl (the names
# newer CAF releases export, so an upgrade keeps working) and the variables
# CAF_FOUND, CAF_VERSION, CAF_INCLUDE_DIR.

find_path(CAF_INCLUDE_DIR NAMES caf/all.hpp caf/config.hpp)
find_library(CAF_CORE_LIBRARY NAMES caf_core)
find_library(CAF_IO_LIBRARY NAMES caf_io)
find_library(CAF_OPENSSL_LIBRARY NAMES caf_openssl)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  # CAF_VERSION is an integer such as 1706 for 0.17.6.
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_v "${_caf_version_line}")
  if(_caf_v)
    math(EXPR _caf_major "${_caf_v} / 10000")
    math(EXPR _caf_minor "(${_caf_v} / 100) % 100")
    math(EXPR _caf_patch "${_caf_v} % 100")
    set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND)
  find_package(Threads REQUIRED)
  if(NOT TARGET CAF::core)
    add_library(CAF::core SHARED IMPORTED)
    set_target_properties(CAF::core PROPERTIES
      IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
  if(NOT TARGET CAF::io)
    add_library(CAF::io SHARED IMPORTED)
    set_target_properties(CAF::io PROPERTIES
      IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::core)
  endif()
  if(CAF_OPENSSL_LIBRARY AND NOT TARGET CAF::openssl)
    add_library(CAF::openssl SHARED IMPORTED)
    set_target_properties(CAF::openssl PROPERTIES
      IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::io)
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY)
