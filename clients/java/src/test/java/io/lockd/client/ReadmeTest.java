package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;

/**
 * Compiles and runs the Java examples of the documentation (README.md and docs/), as written but
 * for lockd's address, against a lockd on real Redis.
 */
class ReadmeTest {
  @Test
  void theReadmeExampleRuns() throws Exception {
    String text = run("java-example");
    assertTrue(text.contains("charging order 42"), text);
    assertTrue(text.matches("(?s).*writing with fencing token \\d+.*"), text);
  }

  @Test
  void theReadmeElectionExampleRuns() throws Exception {
    String text = run("java-election-example");
    assertTrue(text.matches("(?s).*scheduling, term \\d+\nnot scheduling\n.*"), text);
    assertTrue(text.contains("calling the upstream"), text);
  }

  /** README.md and every page of docs/: where the documentation's examples live. */
  private static String documentation() throws Exception {
    StringBuilder text =
        new StringBuilder(Files.readString(Processes.repoRoot().resolve("README.md")));
    try (Stream<Path> pages = Files.list(Processes.repoRoot().resolve("docs"))) {
      for (Path page : pages.filter(p -> p.toString().endsWith(".md")).sorted().toList()) {
        text.append('\n').append(Files.readString(page));
      }
    }
    return text.toString();
  }

  /** Compiles and runs the documentation's Java block named block; returns what it printed. */
  private String run(String block) throws Exception {
    Matcher m =
        Pattern.compile("(?s)<!-- " + block + "[ :][^>]*-->\\s*```java\\n(.*?)```")
            .matcher(documentation());
    assertTrue(m.find(), "README.md and docs/ have no " + block + " block");
    StringBuilder imports = new StringBuilder();
    StringBuilder body = new StringBuilder();
    for (String line : m.group(1).split("\n", -1)) {
      (line.startsWith("import ") ? imports : body).append(line).append('\n');
    }
    String classpath = System.getProperty("lockd.test.classpath");
    assertNotNull(classpath, "build.sh passes -Dlockd.test.classpath");

    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd lockd = Processes.Lockd.start(redis)) {
      Path dir = Files.createTempDirectory("lockd-java-readme-");
      Path src = dir.resolve("ReadmeExample.java");
      Files.writeString(
          src,
          imports
              + "public class ReadmeExample {\n  public static void run() throws Exception {\n"
              + body.toString().replace("127.0.0.1:50051", lockd.addr)
              + "  }\n}\n");
      JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
      ByteArrayOutputStream diagnostics = new ByteArrayOutputStream();
      int rc =
          javac.run(
              null, diagnostics, diagnostics,
              List.of("-cp", classpath, "-d", dir.toString(), src.toString()).toArray(new String[0]));
      assertEquals(0, rc, diagnostics.toString(StandardCharsets.UTF_8));

      ByteArrayOutputStream out = new ByteArrayOutputStream();
      PrintStream stdout = System.out;
      try (URLClassLoader loader =
          new URLClassLoader(new URL[] {dir.toUri().toURL()}, getClass().getClassLoader())) {
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        loader.loadClass("ReadmeExample").getMethod("run").invoke(null);
      } finally {
        System.setOut(stdout);
      }
      return out.toString(StandardCharsets.UTF_8);
    }
  }
}
