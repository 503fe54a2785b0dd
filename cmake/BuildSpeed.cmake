# How the targets compile quickly from a cold start (docs/PERFORMANCE.md, "Build and test time"):
# most of a translation unit's time is not parsing LibTorch's headers (precompiled) but instantiating
# and optimizing the same inline code (ATen, nlohmann::json, CLI11, GoogleTest, Qt) in every file, so
# each target compiles its sources in batches (unity build), where that code is compiled once per
# batch. A cold build takes about half the CPU time it took file by file.
#
# Sources must be unity-safe: no two files of a target may define the same name in an anonymous
# namespace or as a static (tests: each test file's body is in its own namespace test_NAME).
# -DATTNSCOPE_UNITY_BUILD=OFF compiles file by file, which rebuilds one edited file faster.
option(ATTNSCOPE_UNITY_BUILD "Compile each target's sources in batches (unity build)" ON)

# attnscope_unity(target batch_size): batches of batch_size sources. Sizes are chosen per target
# so that two cores stay busy (no target ends on one large batch) while batches stay large enough
# to share their instantiations.
function(attnscope_unity target batch_size)
  if(ATTNSCOPE_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${batch_size})
    # GCC warns about a class whose base is in an anonymous namespace unless both are in the main
    # file; in a batch no source is (gtest's TEST_F classes derive from the file's own fixture).
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
    endif()
  endif()
endfunction()

# moc only reads headers: it need not wait until the libraries a Qt target links are built, which
# would keep one core idle while core's last files compile.
set(CMAKE_AUTOGEN_ORIGIN_DEPENDS OFF)
