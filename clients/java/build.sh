#!/usr/bin/env bash
# Builds lockd's Java client with javac against Debian's jars in /usr/share/java
# and runs its JUnit tests. pom.xml describes the same jar for Maven and Gradle
# users; see README.md for why it is not built with Maven here.
#
#   ./build.sh jar    generate stubs from ../../proto, compile, write build/lockd-client.jar
#                     (and fail if it holds anything but io/lockd/** and META-INF/)
#   ./build.sh test   the jar, a check that the jar check refuses a foreign class, then
#                     the tests against real lockd and redis-server processes
#                     (LOCKD_BIN and WECHAT_FAKE_BIN name prebuilt binaries; otherwise the
#                     tests build them with go; JUNIT_SELECT="--select-class io.lockd.client.LossTest"
#                     runs one class)
set -euo pipefail
cd "$(dirname "$0")"

JARS=/usr/share/java
# The runtime classpath: grpc-java with Netty (its per-module jars), protobuf and what they use.
RUNTIME=(grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
  protobuf proto-google-common-protos guava gson perfmark-api error_prone_annotations jsr305
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common
  netty-handler netty-handler-proxy netty-resolver netty-transport
  netty-transport-native-unix-common netty-tcnative geronimo-annotation-1.3-spec)
TEST=(junit-jupiter-api opentest4j junit-platform-commons apiguardian-api)
# Maven's model builder (Debian's maven), with which PomTest reads pom.xml as Maven does.
MAVEN_MODEL=(maven-model-builder-3.x maven-model-3.x maven-builder-support-3.x maven-artifact-3.x
  plexus-utils plexus-interpolation)

classpath() {
  local dir=$JARS out="" j
  if [[ $1 == --in ]]; then dir=$2; shift 2; fi
  for j in "$@"; do
    [[ -f "$dir/$j.jar" ]] || { echo "missing $dir/$j.jar (run make java-deps)" >&2; exit 1; }
    out+="$dir/$j.jar:"
  done
  printf '%s' "${out%:}"
}

CP=$(classpath "${RUNTIME[@]}")

# TLS: gRPC negotiates HTTP/2 by ALPN. Debian's netty 4.1.48 leaves out its JDK
# ALPN negotiator, so grpc-netty takes TLS from OpenSSL through netty-tcnative
# (libnetty-tcnative-jni). Debian installs that library as libnetty-tcnative.so,
# but netty loads it as netty_tcnative, and the library checks its own file name
# when loaded: a copy under that name goes in build/native, which the JVMs
# running the client get as java.library.path. (With netty from Maven Central,
# the JDK's own ALPN works and none of this is needed.)
native_lib() {
  local so
  so=$(find /usr/lib -name libnetty-tcnative.so -path '*jni*' 2>/dev/null | head -1)
  [[ -n "$so" ]] || { echo "missing libnetty-tcnative.so (run make java-deps)" >&2; exit 1; }
  mkdir -p build/native
  cp "$so" build/native/libnetty_tcnative.so
}

# check_jar fails unless every entry of the jar $1 is lockd's own (io/lockd/**,
# also under META-INF/versions/N/) or other META-INF metadata: the client bundles
# none of its dependencies, so it can never clash with an application's copies.
check_jar() {
  local foreign
  foreign=$(jar --list --file "$1" | awk '
    /^(META-INF\/versions\/[0-9]+\/)?io\/(lockd\/.*)?$/ { next }
    /^META-INF\// && !/\.class$/ { next }
    { print }')
  if [[ -n "$foreign" ]]; then
    echo "$1 holds entries outside io/lockd/ and META-INF/:" >&2
    echo "$foreign" >&2
    return 1
  fi
}

# check_jar_refuses_foreign adds a class of another package to a copy of the
# jar and expects check_jar to refuse it.
check_jar_refuses_foreign() {
  local tmp
  tmp=$(mktemp -d)
  mkdir -p "$tmp/org/example"
  : >"$tmp/org/example/Foreign.class"
  cp build/lockd-client.jar "$tmp/probe.jar"
  jar --update --file "$tmp/probe.jar" -C "$tmp" org/example/Foreign.class
  if check_jar "$tmp/probe.jar" 2>/dev/null; then
    rm -rf "$tmp"
    echo "check_jar accepted a jar holding org/example/Foreign.class" >&2
    exit 1
  fi
  rm -rf "$tmp"
}

build_jar() {
  rm -rf build/gen build/classes
  mkdir -p build/gen build/classes
  # Stubs come from the protos at every build, so they cannot go stale; they are not committed.
  protoc -I../../proto -I/usr/include \
    --java_out=build/gen \
    --plugin=protoc-gen-grpc-java="$(command -v grpc_java_plugin)" --grpc-java_out=build/gen \
    ../../proto/lockd/v1/*.proto
  javac --release 11 -encoding UTF-8 -nowarn -cp "$CP" -d build/classes \
    $(find build/gen -name '*.java') >/dev/null
  javac --release 11 -encoding UTF-8 -Xlint:all,-processing -Werror -cp "$CP:build/classes" -d build/classes \
    $(find src/main/java -name '*.java')
  mkdir -p build/classes/META-INF
  cp ../../LICENSE build/classes/META-INF/LICENSE
  jar --create --file build/lockd-client.jar -C build/classes .
  check_jar build/lockd-client.jar
  native_lib
  echo "wrote clients/java/build/lockd-client.jar"
}

run_tests() {
  rm -rf build/test-classes
  mkdir -p build/test-classes
  local tcp
  tcp="$CP:build/lockd-client.jar:$(classpath "${TEST[@]}"):$(classpath --in /usr/share/maven/lib "${MAVEN_MODEL[@]}")"
  javac --release 17 -encoding UTF-8 -Xlint:all,-processing -Werror -cp "$tcp" -d build/test-classes \
    $(find src/test/java -name '*.java')
  java -Djava.library.path="$PWD/build/native" -Dlockd.test.classpath="$tcp:build/test-classes" \
    -Dlockd.client.classpath="$CP:$PWD/build/lockd-client.jar" -jar "$JARS/junit-platform-console-standalone.jar" \
    --class-path "$tcp:build/test-classes" \
    ${JUNIT_SELECT:---select-package io.lockd.client} \
    --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests \
    --config=junit.jupiter.execution.parallel.enabled=false
}

case "${1:-test}" in
  jar) build_jar ;;
  test) build_jar; check_jar_refuses_foreign; run_tests ;;
  *) echo "usage: $0 [jar|test]" >&2; exit 2 ;;
esac
