#!/usr/bin/env bash
# Installs what ringmirror's tests need on a fresh Debian machine with the
# Rust toolchain: a C toolchain for librdkafka (built from source by the
# rdkafka crate), kcat, the Python Kafka clients the interop tests drive, and
# the tansu broker, KafkaJS, and Apache Kafka (broker, tools, clients) with our Java
# test driver from Maven Central.
# Idempotent: installs only what is missing.
set -euo pipefail

# kcat: the command-line client the serving tests read (and try to write) the
# agent's listener with. socat and openssl: a TLS endpoint (OpenSSL) in front
# of a test source, and its certificates (tests/tls_source.rs). fonts-dejavu-core:
# the text of the perf harness's PNG plots (perf/src/plot.rs).
apt_packages=(build-essential pkg-config zlib1g-dev python3 kcat socat openssl fonts-dejavu-core)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# kafka-python reads and writes record batches in the interop tests; lz4,
# python-snappy and zstandard give it every compression codec. confluent-kafka
# (librdkafka from Python) is a second unchanged client of the agent's listener.
py_modules=(kafka lz4 snappy zstandard confluent_kafka)
py_packages=(kafka-python lz4 python-snappy zstandard confluent-kafka)
if ! python3 -c "import $(IFS=,; echo "${py_modules[*]}")" 2>/dev/null; then
  echo "setup: installing Python packages: ${py_packages[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  # A fresh Debian has no pip for its python3.
  if ! python3 -m pip --version >/dev/null 2>&1; then
    $sudo_cmd apt-get update -qq
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
  fi
  # Debian marks its python3 as externally managed (PEP 668); these are
  # test-only packages on a CI machine, so install them anyway.
  pip_flags=(--quiet --disable-pip-version-check)
  if python3 -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    pip_flags+=(--break-system-packages)
  fi
  python3 -m pip install "${pip_flags[@]}" "${py_packages[@]}"
fi
# tansu: an independent Kafka-compatible broker, a mirror source in
# tests/tansu_source.rs. Built from crates.io (no binary is published to the
# registries we reach); a debug build (~4 min on 2 cores) is half the time
# of a release one and fast enough for a test peer. dynostore gives its
# in-memory storage engine.
tansu_version="0.6.0"
if [ "$(tansu --version 2>/dev/null)" != "tansu $tansu_version" ]; then
  echo "setup: installing tansu $tansu_version (cargo install, a few minutes)"
  cargo install tansu --version "$tansu_version" --locked --debug --features dynostore --quiet
fi
# Apache Kafka, the reference peer: tests/kafka/pom.xml resolves the broker
# (KRaft), its CLI tools, Streams, Connect and MirrorMaker 2 from Maven
# Central and builds the Java test driver against Kafka's own client library;
# the tests read the classpath it writes. Maven caches the jars in ~/.m2, so
# later runs are offline; rebuilt only when the pom or the driver changed.
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  echo "setup: installing Java 17 and Maven"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
fi
kafka_dir="tests/kafka"
kafka_stamp="$kafka_dir/target/classpath.txt"
if [ ! -f "$kafka_stamp" ] || [ -n "$(find "$kafka_dir/pom.xml" "$kafka_dir/src" -newer "$kafka_stamp" -print -quit)" ]; then
  echo "setup: resolving Apache Kafka and building the Java test driver (mvn, tests/kafka)"
  mvn -B -q -f "$kafka_dir/pom.xml" package
fi
# KafkaJS (npm): a client with its own protocol code, reading our listener in
# tests/kafka_source.rs, with kafkajs-lz4 (whose lz4 package builds its native
# part with node-gyp at install: the tarball ships macOS binaries).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing Node.js and npm"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
if [ ! -d tests/kafkajs/node_modules/kafkajs ] || [ tests/kafkajs/package-lock.json -nt tests/kafkajs/node_modules ]; then
  echo "setup: installing KafkaJS (npm ci, tests/kafkajs)"
  # Retried: a registry hiccup must not fail the whole run; the last try's
  # errors are printed (npm's --silent hid why a CI run stopped here).
  npm_tries_max=3
  for try in $(seq 1 "$npm_tries_max"); do
    if (cd tests/kafkajs && npm ci --no-audit --no-fund --loglevel=error); then
      break
    fi
    if [ "$try" -eq "$npm_tries_max" ]; then
      echo "setup: npm ci failed $npm_tries_max times in tests/kafkajs" >&2
      exit 1
    fi
    echo "setup: npm ci failed (try $try of $npm_tries_max), trying again in $((try * 5)) s" >&2
    sleep $((try * 5))
  done
fi
echo "setup: done"
