# CMake's flags for Horovod's CPU build (envs/setup.sh): its RelWithDebInfo without the debug
# information (Horovod's CMakeLists turns -O2 into -O3 itself). Set as cache values here because
# CMake's *_INIT values are put before its defaults, which keep -g. What it saves of the build:
# docs/benchmarks.md#the-quick-start-on-the-cpu.
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O2 -DNDEBUG" CACHE STRING "")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O2 -DNDEBUG" CACHE STRING "")
