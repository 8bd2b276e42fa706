package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.apache.maven.model.Dependency;
import org.apache.maven.model.Model;
import org.junit.jupiter.api.Test;

/**
 * clients/java/example is an application laid out as Maven expects, depending on lockd-client by
 * its coordinates alone. It is compiled here against lockd-client.jar and the jars of the client's
 * pom (Debian's), and run in a JVM of its own against a lockd on real Redis.
 */
class ExampleTest {
  @Test
  void theMavenShapedExampleBuildsAndRuns() throws Exception {
    Path example = Processes.repoRoot().resolve("clients/java/example");
    Model app = PomTest.effective(example.resolve("pom.xml"));
    Model client = PomTest.effective(PomTest.pom());
    List<Dependency> deps = app.getDependencies();
    assertEquals(1, deps.size(), "the example needs lockd-client alone: " + deps);
    assertEquals(client.getGroupId() + ":" + client.getArtifactId(), deps.get(0).getGroupId() + ":" + deps.get(0).getArtifactId());
    assertEquals(client.getVersion(), deps.get(0).getVersion());

    String classpath = System.getProperty("lockd.client.classpath");
    Path classes = Files.createTempDirectory("lockd-java-example-");
    List<String> args = new ArrayList<>(List.of("--release", app.getProperties().getProperty("maven.compiler.release"),
        "-Xlint:all", "-Werror", "-cp", classpath, "-d", classes.toString()));
    try (Stream<Path> sources = Files.walk(example.resolve("src/main/java"))) {
      args.addAll(sources.filter(p -> p.toString().endsWith(".java")).map(Path::toString).collect(Collectors.toList()));
    }
    JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
    ByteArrayOutputStream diagnostics = new ByteArrayOutputStream();
    int rc = javac.run(null, diagnostics, diagnostics, args.toArray(new String[0]));
    assertEquals(0, rc, diagnostics.toString(StandardCharsets.UTF_8));

    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd lockd = Processes.Lockd.start(redis)) {
      Process p =
          new ProcessBuilder(
                  Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                  "-Djava.library.path=" + System.getProperty("java.library.path"),
                  "-cp", classes + java.io.File.pathSeparator + classpath,
                  "com.example.orders.Main", lockd.addr)
              .redirectErrorStream(true)
              .start();
      String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(p.waitFor(60, TimeUnit.SECONDS), out);
      assertEquals(0, p.exitValue(), out);
      assertTrue(out.matches("(?s).*charging order 42 with fencing token \\d+; a second holder got it: false\n.*"), out);
      assertTrue(out.contains("order 43 locked through java.util.concurrent.locks.Lock\n"), out);
      assertTrue(out.contains("holding a permit of upstream/api, mode PERMIT\n"), out);
      assertTrue(out.matches("(?s).*scheduling in term \\d+, leader value node-1\n.*"), out);
      assertTrue(out.contains("reading the report, mode READ\n"), out);
      assertTrue(out.contains("an empty key is refused: INVALID_ARGUMENT\n"), out);
    }
  }
}
