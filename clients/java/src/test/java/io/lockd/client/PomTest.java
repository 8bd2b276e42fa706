package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.spi.ToolProvider;
import java.util.stream.Collectors;
import org.apache.maven.model.Dependency;
import org.apache.maven.model.Model;
import org.apache.maven.model.building.DefaultModelBuilderFactory;
import org.apache.maven.model.building.DefaultModelBuildingRequest;
import org.apache.maven.model.building.ModelBuildingException;
import org.apache.maven.model.building.ModelBuildingRequest;
import org.apache.maven.model.building.ModelBuildingResult;
import org.junit.jupiter.api.Test;

/**
 * pom.xml is what a Maven or Gradle user gets: Maven's own model builder (Debian's, offline)
 * reads it strictly, and its dependencies are the very jars build.sh compiles and tests with.
 */
class PomTest {
  /** Debian's Maven repository: each artifact at its version, linked to a jar in /usr/share/java. */
  private static final Path DEBIAN_REPO = Path.of("/usr/share/maven-repo");

  /** The effective model of pom, read strictly; any problem Maven reports fails the test. */
  static Model effective(Path pom) {
    DefaultModelBuildingRequest r = new DefaultModelBuildingRequest();
    r.setPomFile(pom.toFile());
    r.setValidationLevel(ModelBuildingRequest.VALIDATION_LEVEL_STRICT);
    r.setSystemProperties(System.getProperties());
    r.setProcessPlugins(false);
    try {
      ModelBuildingResult res = new DefaultModelBuilderFactory().newInstance().build(r);
      assertEquals(List.of(), res.getProblems(), pom + ": Maven reports problems");
      return res.getEffectiveModel();
    } catch (ModelBuildingException e) {
      throw new AssertionError(pom + " is not a valid pom: " + e.getProblems(), e);
    }
  }

  static Path pom() {
    return Processes.repoRoot().resolve("clients/java/pom.xml");
  }

  /** The jars of the client's runtime classpath as build.sh passes it, by real path. */
  static Set<Path> classpathJars() throws IOException {
    String cp = System.getProperty("lockd.client.classpath");
    assertNotNull(cp, "build.sh passes -Dlockd.client.classpath");
    Set<Path> jars = new TreeSet<>();
    for (String p : cp.split(File.pathSeparator)) {
      jars.add(Path.of(p).toRealPath());
    }
    return jars;
  }

  /** The jar Debian's Maven repository holds for d at its version, by real path. */
  static Path debianJar(Dependency d) throws IOException {
    Path jar =
        DEBIAN_REPO
            .resolve(d.getGroupId().replace('.', '/'))
            .resolve(d.getArtifactId())
            .resolve(d.getVersion())
            .resolve(d.getArtifactId() + "-" + d.getVersion() + ".jar");
    assertTrue(
        Files.exists(jar),
        d.getManagementKey() + ":" + d.getVersion() + " is not the version Debian ships (no " + jar
            + ")");
    return jar.toRealPath();
  }

  @Test
  void mavenReadsThePom() {
    Model m = effective(pom());
    assertEquals("io.lockd:lockd-client:jar:0.1.0", m.getId());
    assertEquals("Apache-2.0", m.getLicenses().get(0).getName());
    assertTrue(m.getDependencies().stream().allMatch(d -> d.getVersion() != null));
  }

  @Test
  void everyDependencyIsAJarTheBuildUsesAtItsVersion() throws IOException {
    Set<Path> used = classpathJars();
    for (Dependency d : effective(pom()).getDependencies()) {
      Path jar = debianJar(d);
      assertTrue(used.contains(jar), d.getManagementKey() + " (" + jar + ") is not on build.sh's classpath");
    }
  }

  @Test
  void theCompileDependenciesAreWhatTheJarUses() throws IOException {
    Map<Path, String> declared = new HashMap<>();
    for (Dependency d : effective(pom()).getDependencies()) {
      if ("compile".equals(d.getScope())) {
        declared.put(debianJar(d), d.getManagementKey());
      }
    }
    // jdeps lists the jars the client's classes (and their stubs) refer to directly.
    ToolProvider jdeps = ToolProvider.findFirst("jdeps").orElseThrow();
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    String jar = Processes.repoRoot().resolve("clients/java/build/lockd-client.jar").toString();
    int rc =
        jdeps.run(
            new PrintStream(out, true, StandardCharsets.UTF_8),
            System.err,
            "-summary", "-cp", System.getProperty("lockd.client.classpath"), jar);
    String summary = out.toString(StandardCharsets.UTF_8);
    assertEquals(0, rc, summary);
    Set<Path> direct = new TreeSet<>();
    Matcher m = Pattern.compile("(?m)^lockd-client\\.jar -> (/\\S+\\.jar)$").matcher(summary);
    while (m.find()) {
      direct.add(Path.of(m.group(1)).toRealPath());
    }
    assertEquals(
        new TreeSet<>(declared.keySet()),
        direct,
        "compile dependencies " + declared.values().stream().sorted().collect(Collectors.toList())
            + " differ from what jdeps finds the jar using:\n" + summary);
  }
}
