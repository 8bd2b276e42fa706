package io.lockd.client;

import io.grpc.netty.GrpcSslContexts;
import io.netty.handler.ssl.JdkAlpnRestored;
import io.netty.handler.ssl.JdkSslContext;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import io.netty.handler.ssl.SslProvider;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.List;

/** ClientTls builds the client's TLS context from PEM files. */
final class ClientTls {
  private ClientTls() {}

  /**
   * A client context trusting the CAs in trust (null: the system's), presenting cert and key when
   * set (mutual TLS).
   */
  static SslContext context(Path trust, Path cert, Path key) {
    try {
      return material(GrpcSslContexts.forClient(), trust, cert, key).build();
    } catch (UnsupportedOperationException noAlpn) {
      // Debian's netty lacks the JDK ALPN negotiator: use the JDK engine with ALPN directly.
      try {
        SslContext base =
            material(SslContextBuilder.forClient().sslProvider(SslProvider.JDK), trust, cert, key)
                .build();
        return JdkAlpnRestored.client((JdkSslContext) base, List.of("h2"));
      } catch (IOException e) {
        throw new UncheckedIOException("TLS setup: " + e.getMessage(), e);
      }
    } catch (IOException e) {
      throw new UncheckedIOException("TLS setup: " + e.getMessage(), e);
    }
  }

  private static SslContextBuilder material(SslContextBuilder b, Path trust, Path cert, Path key) {
    if (trust != null) {
      b.trustManager(trust.toFile());
    }
    if (cert != null) {
      b.keyManager(cert.toFile(), key.toFile());
    }
    return b;
  }
}
