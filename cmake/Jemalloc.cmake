# jemalloc for the executables, with attnscope's settings compiled in (core/src/base/malloc_conf.cpp).
# LibTorch's large per-step buffers otherwise go back to the kernel and fault in again on every
# step (glibc: mmap/munmap; jemalloc's defaults: MADV_DONTNEED of every freed extent >= 8 MiB).
# Optional: without jemalloc (the GPU machine's pip LibTorch) the programs use glibc malloc with
# configure_runtime()'s thresholds (core/src/base/runtime.cpp).
find_package(PkgConfig REQUIRED)
pkg_check_modules(JEMALLOC IMPORTED_TARGET jemalloc)
if(NOT JEMALLOC_FOUND)
  message(STATUS "attnscope: jemalloc not found: the programs use glibc malloc")
endif()

# Links jemalloc into the executable `target` and gives it the settings. Only executables: jemalloc
# reads the `malloc_conf` global from the program, and a static library's object would not be
# linked in unless something referenced it.
function(attnscope_use_jemalloc target)
  if(JEMALLOC_FOUND)
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/core/src/base/malloc_conf.cpp)
    set_source_files_properties(${PROJECT_SOURCE_DIR}/core/src/base/malloc_conf.cpp
      TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
    target_link_libraries(${target} PRIVATE PkgConfig::JEMALLOC)
    target_compile_definitions(${target} PRIVATE ATTNSCOPE_HAVE_JEMALLOC=1)
  endif()
endfunction()
