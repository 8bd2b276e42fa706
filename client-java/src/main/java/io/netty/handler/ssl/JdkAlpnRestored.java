package io.netty.handler.ssl;

import java.util.List;
import javax.net.ssl.SSLEngine;

/**
 * JdkAlpnRestored gives TLS with ALPN through the JDK's own TLS engine (Java 9 and later), which
 * gRPC needs (HTTP/2 is chosen by ALPN). Debian's build of netty leaves its JDK ALPN negotiator
 * out, so {@code GrpcSslContexts.forClient()} fails there with "JDK provider does not support ALPN
 * protocol"; the engine that does the work (Java9SslEngine) is still in the jar. This class lives
 * in netty's package because that engine and the constructor taking a negotiator are
 * package-private. lockd's client uses it only when netty's own way fails.
 */
@SuppressWarnings("deprecation") // the negotiator interface netty deprecated is what its JDK engine takes
public final class JdkAlpnRestored {
  private JdkAlpnRestored() {}

  /**
   * A client context using the SSLContext (trust and key material) of base, offering ALPN
   * protocols and failing the handshake unless the server picks one of them.
   */
  public static SslContext client(JdkSslContext base, List<String> protocols) {
    JdkApplicationProtocolNegotiator.SslEngineWrapperFactory wrapper =
        new JdkApplicationProtocolNegotiator.SslEngineWrapperFactory() {
          @Override
          public SSLEngine wrapSslEngine(
              SSLEngine engine, JdkApplicationProtocolNegotiator negotiator, boolean isServer) {
            return new Java9SslEngine(engine, negotiator, isServer);
          }
        };
    JdkApplicationProtocolNegotiator negotiator =
        new JdkBaseApplicationProtocolNegotiator(
            wrapper,
            JdkBaseApplicationProtocolNegotiator.FAIL_SELECTOR_FACTORY,
            JdkBaseApplicationProtocolNegotiator.FAIL_SELECTION_LISTENER_FACTORY,
            protocols);
    return new JdkSslContext(
        base.context(),
        true,
        base.cipherSuites(),
        IdentityCipherSuiteFilter.INSTANCE,
        negotiator,
        ClientAuth.NONE,
        null,
        false);
  }
}
