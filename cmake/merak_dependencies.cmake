# Third-party dependencies, all from Debian packages (deploy/install-deps.sh).

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(tomlplusplus 3 REQUIRED)  # config files (apps/config_file.cpp)
find_package(CAF 0.17 REQUIRED)
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto SSL)  # the job handshake's HMAC (job/auth), TLS (job/tls)
find_package(ucx CONFIG QUIET)

# GEMM backends. oneDNN's sgemm dispatches on the CPU's instruction set
# (AVX-512 where present) and measured fastest on the GPT shapes (bench/gemm_bench.cpp);
# OpenBLAS is the fallback and a comparison point.
# Debian's oneDNN package config demands OpenCL (its GPU runtime) and fails
# the whole configure without it: look for OpenCL first, and without it build
# on OpenBLAS and Eigen only.
find_package(OpenCL QUIET)
if(OpenCL_FOUND)
  find_package(dnnl CONFIG QUIET)
else()
  message(WARNING "merak: OpenCL development files missing (ocl-icd-opencl-dev): oneDNN GEMM off")
endif()
set(MERAK_GEMM_BACKENDS "")
if(dnnl_FOUND)
  list(APPEND MERAK_GEMM_BACKENDS onednn)
endif()
find_path(MERAK_CBLAS_INCLUDE cblas.h)
find_library(MERAK_OPENBLAS_LIBRARY NAMES openblas)
if(MERAK_CBLAS_INCLUDE AND MERAK_OPENBLAS_LIBRARY)
  list(APPEND MERAK_GEMM_BACKENDS openblas)
endif()
list(APPEND MERAK_GEMM_BACKENDS eigen)

# CUDA: optional. AUTO enables it when the toolkit (with cuBLAS) is found.
set(MERAK_CUDA_FOUND OFF)
if(NOT MERAK_WITH_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublas)
    set(MERAK_CUDA_FOUND ON)
    # The toolkit exports no NCCL target: import the library shipped beside it.
    find_library(MERAK_NCCL_LIBRARY NAMES nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(MERAK_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(MERAK_NCCL_LIBRARY AND MERAK_NCCL_INCLUDE AND NOT TARGET merak::nccl)
      add_library(merak::nccl SHARED IMPORTED)
      set_target_properties(merak::nccl PROPERTIES
        IMPORTED_LOCATION "${MERAK_NCCL_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${MERAK_NCCL_INCLUDE}")
    endif()
  elseif(MERAK_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MERAK_WITH_CUDA=ON but no CUDA toolkit with cuBLAS was found")
  endif()
endif()
