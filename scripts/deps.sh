#!/usr/bin/env bash
# Installs what building and testing Trove needs on a Debian/Ubuntu machine, only when missing.
# Sourced by scripts/demo.sh and scripts/test.sh.

need_pkgs=()
command -v cc >/dev/null 2>&1 || need_pkgs+=(build-essential)
command -v pkg-config >/dev/null 2>&1 || need_pkgs+=(pkg-config)
command -v git >/dev/null 2>&1 || need_pkgs+=(git)
# The image pipeline (crates/vision) builds libjpeg-turbo from source: cmake, and nasm for its
# SIMD code.
command -v cmake >/dev/null 2>&1 || need_pkgs+=(cmake)
command -v nasm >/dev/null 2>&1 || need_pkgs+=(nasm)
# The mount's integration tests run real programs on a mounted cluster: fio, SQLite (through
# python3's sqlite3 module; the sqlite3 shell for humans), fusermount3 for unprivileged mounts.
command -v fio >/dev/null 2>&1 || need_pkgs+=(fio)
command -v fusermount3 >/dev/null 2>&1 || need_pkgs+=(fuse3)
command -v sqlite3 >/dev/null 2>&1 || need_pkgs+=(sqlite3)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
command -v tar >/dev/null 2>&1 || need_pkgs+=(tar)
# The storage tests look at the page cache with util-linux's fincore.
command -v fincore >/dev/null 2>&1 || need_pkgs+=(util-linux)
# The multi-host tests (crates/e2e/tests/multihost.rs) put each host in a network namespace.
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)
# The gateway tests drive `trove s3` with real S3 clients (rclone, s3cmd; awscli and boto3 come
# from pip below) and `trove nfs` with libnfs-utils' userspace NFS client; openssl makes the
# TLS test's certificate.
command -v rclone >/dev/null 2>&1 || need_pkgs+=(rclone)
command -v s3cmd >/dev/null 2>&1 || need_pkgs+=(s3cmd)
command -v nfs-ls >/dev/null 2>&1 || need_pkgs+=(libnfs-utils)
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
# The security test captures the cluster's loopback traffic to show no plaintext crosses it.
command -v tcpdump >/dev/null 2>&1 || need_pkgs+=(tcpdump)
# The metrics test scrapes every role with a real Prometheus server (promtool comes with it);
# the dashboard test renders the dashboard in headless Chromium.
command -v prometheus >/dev/null 2>&1 || need_pkgs+=(prometheus)
command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
command -v pip3 >/dev/null 2>&1 || python3 -m pip --version >/dev/null 2>&1 || need_pkgs+=(python3-pip)
# The Python package's test (crates/e2e/tests/python.rs) makes a virtual environment.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_pkgs+=(python3-venv)

if [ ${#need_pkgs[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    echo "installing: ${need_pkgs[*]}" >&2
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "please install: ${need_pkgs[*]}" >&2
    exit 1
  fi
fi
# The mount tests need the kernel's FUSE device; load the module when it is not there yet.
if [ ! -e /dev/fuse ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd modprobe fuse 2>/dev/null || echo "/dev/fuse is absent and the fuse module cannot be loaded: the mount tests will fail" >&2
fi

need_pip=()
command -v aws >/dev/null 2>&1 || need_pip+=(awscli)
python3 -c 'import boto3' >/dev/null 2>&1 || need_pip+=(boto3)
# boto3's CRC32C and CRC64NVME checksums (the S3 compatibility test sends and checks them).
python3 -c 'import awscrt' >/dev/null 2>&1 || need_pip+=(awscrt)
# The benchmark format tests read our npz and TFRecord files with independent readers.
python3 -c 'import numpy' >/dev/null 2>&1 || need_pip+=(numpy)
python3 -c 'import tfrecord' >/dev/null 2>&1 || need_pip+=(tfrecord)
# The Python package: maturin builds its wheel; its tests use fsspec, pandas and pyarrow (a
# Parquet file through trove://) and Pillow (the reference for trove.vision).
python3 -m maturin --version >/dev/null 2>&1 || need_pip+=("maturin>=1.16,<2")
for mod in fsspec pandas pyarrow; do
  python3 -c "import $mod" >/dev/null 2>&1 || need_pip+=("$mod")
done
python3 -c 'import PIL' >/dev/null 2>&1 || need_pip+=(pillow)
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "installing with pip: ${need_pip[*]}" >&2
  python3 -m pip install --quiet "${need_pip[@]}" >/dev/null 2>&1 \
    || python3 -m pip install --quiet --break-system-packages "${need_pip[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "Trove needs Rust 1.90 or newer (cargo and rustc); install it with rustup (https://rustup.rs)." >&2
  exit 1
fi
rust_minor=$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')
if [ "${rust_minor:-0}" -lt 90 ]; then
  echo "Trove needs Rust 1.90 or newer; found $(rustc --version). Update with 'rustup update'." >&2
  exit 1
fi

# The object pool test (crates/e2e/tests/object_pool.rs) stores shards in a real S3 server
# that is not Trove: Garage, built once (about 7 minutes on 2 cores) into a cache outside
# target/ and reused from there, so a warm machine does not build it again.
garage_version="2.5.0"
garage_root="${TROVE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trove}/garage"
if [ ! -x "$garage_root/bin/garage" ]; then
  echo "building Garage $garage_version into $garage_root (once)" >&2
  mkdir -p "$garage_root"
  cargo install garage --locked --version "$garage_version" --root "$garage_root" >&2 \
    || { echo "cannot build Garage (the object pool test needs it)" >&2; exit 1; }
fi
case ":$PATH:" in
  *":$garage_root/bin:"*) ;;
  *) export PATH="$garage_root/bin:$PATH" ;;
esac
