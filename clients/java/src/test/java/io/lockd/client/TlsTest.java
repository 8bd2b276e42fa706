package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.grpc.Status;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/** The client speaks TLS (and mutual TLS) to a lockd serving it. */
class TlsTest {
  /** Makes a self-signed certificate and its PKCS#8 key as name.pem and name-key.pem. */
  static Path selfSigned(Path dir, String name) throws Exception {
    Path cert = dir.resolve(name + ".pem");
    Process p =
        new ProcessBuilder(
                "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-days", "1", "-subj", "/CN=" + name, "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout",
                dir.resolve(name + "-key.pem").toString(), "-out", cert.toString())
            .redirectErrorStream(true)
            .start();
    String out = new String(p.getInputStream().readAllBytes());
    assertEquals(0, p.waitFor(), out);
    return cert;
  }

  @Test
  void leasesOverTlsAndMutualTls() throws Exception {
    Path dir = Files.createTempDirectory("lockd-java-tls-");
    Path server = selfSigned(dir, "server");
    Path client = selfSigned(dir, "client");
    String[] tls = {"--tls-cert=" + server, "--tls-key=" + dir.resolve("server-key.pem")};
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd lockd = Processes.Lockd.start(redis, tls);
        Processes.Lockd mutual =
            Processes.Lockd.start(redis, tls[0], tls[1], "--tls-client-ca=" + client);
        LockdClient good = LockdClient.builder().target(lockd.addr).tlsTrust(server).build();
        LockdClient plain = LockdClient.builder().target(lockd.addr).retryTimeout(Duration.ofMillis(200)).build();
        LockdClient withCert =
            LockdClient.builder()
                .target(mutual.addr)
                .tlsTrust(server)
                .tlsClientCertificate(client, dir.resolve("client-key.pem"))
                .build();
        LockdClient withoutCert =
            LockdClient.builder().target(mutual.addr).tlsTrust(server).retryTimeout(Duration.ofMillis(200)).build()) {
      good.tryAcquire("java/tls", Duration.ZERO).orElseThrow().close();
      LockdException e =
          assertThrows(LockdException.class, () -> plain.tryAcquire("java/tls", Duration.ZERO));
      assertEquals(Status.Code.UNAVAILABLE, e.code());

      withCert.tryAcquire("java/mtls", Duration.ZERO).orElseThrow().close();
      LockdException refused =
          assertThrows(LockdException.class, () -> withoutCert.tryAcquire("java/mtls", Duration.ZERO));
      assertEquals(Status.Code.UNAVAILABLE, refused.code());
    }
  }
}
