package io.lockd.client;

import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.TlsChannelCredentials;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * ClientChannels opens the client's channels through grpc-api alone ({@link Grpc#newChannelBuilder}
 * with TLS or plaintext credentials), so that whichever transport is on the classpath
 * (grpc-netty, grpc-netty-shaded, grpc-okhttp) carries them.
 */
final class ClientChannels {
  private ClientChannels() {}

  /**
   * One channel per target: TLS when tls is set, trusting the CAs in trust (null: the system's),
   * presenting cert and key when set (mutual TLS), expecting authority (null: the target's host).
   */
  static List<ManagedChannel> open(
      List<String> targets, boolean tls, Path trust, Path cert, Path key, String authority) {
    ChannelCredentials credentials = credentials(tls, trust, cert, key);
    List<ManagedChannel> channels = new ArrayList<>();
    for (String t : targets) {
      ManagedChannelBuilder<?> cb;
      try {
        cb = Grpc.newChannelBuilder(t, credentials);
      } catch (UnsupportedOperationException noAlpn) {
        // Debian's netty has no JDK ALPN: it needs netty-tcnative (see build.sh).
        throw new IllegalStateException(
            "TLS needs ALPN, which this netty cannot offer: " + noAlpn.getMessage()
                + " (with Debian's netty, put netty-tcnative on the classpath and its library,"
                + " named libnetty_tcnative.so, on java.library.path)",
            noAlpn);
      }
      if (tls && authority != null) {
        cb.overrideAuthority(authority);
      }
      channels.add(cb.build());
    }
    return channels;
  }

  private static ChannelCredentials credentials(boolean tls, Path trust, Path cert, Path key) {
    if (!tls) {
      return InsecureChannelCredentials.create();
    }
    TlsChannelCredentials.Builder c = TlsChannelCredentials.newBuilder();
    try {
      if (trust != null) {
        c.trustManager(trust.toFile());
      }
      if (cert != null) {
        c.keyManager(cert.toFile(), key.toFile());
      }
    } catch (IOException e) {
      throw new UncheckedIOException("TLS setup: " + e.getMessage(), e);
    }
    return c.build();
  }
}
