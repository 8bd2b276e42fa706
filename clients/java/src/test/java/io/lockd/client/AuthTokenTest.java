package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Bearer tokens, permissions and the access_token calls against lockd with a config file. */
class AuthTokenTest {
  static final String TOKEN = "orders-token-0123456789abcdef";
  static Processes.Redis redis;
  static Processes.WeChatFake wechat;
  static Processes.Lockd lockd;

  @BeforeAll
  static void start() throws Exception {
    redis = Processes.Redis.start();
    wechat = Processes.WeChatFake.start("wx1234:app-secret");
    Path config = Files.createTempFile("lockd-java-", ".yaml");
    Files.writeString(
        config,
        "apps:\n"
            + "  - {name: mp, provider: wechat, appid: wx1234, secret_env: MP_SECRET, api_base: \""
            + wechat.base
            + "\"}\n"
            + "auth:\n"
            + "  clients:\n"
            + "    - {name: orders, token_env: ORDERS_TOKEN, locks: [\"orders/\"], apps: [mp]}\n");
    lockd =
        Processes.Lockd.start(
            redis, Map.of("MP_SECRET", "app-secret", "ORDERS_TOKEN", TOKEN), "--config=" + config);
  }

  @AfterAll
  static void stop() {
    lockd.close();
    wechat.close();
    redis.close();
  }

  @Test
  void aBearerTokenOpensTheClientsKeysAndApps() throws Exception {
    try (LockdClient anonymous = LockdClient.builder().target(lockd.addr).build();
        LockdClient orders = LockdClient.builder().target(lockd.addr).bearerToken(TOKEN).build()) {
      LockdException e =
          assertThrows(LockdException.class, () -> anonymous.tryAcquire("orders/1", Duration.ZERO));
      assertEquals(Status.Code.UNAUTHENTICATED, e.code());
      try (Lease l = orders.tryAcquire("orders/1", Duration.ZERO).orElseThrow()) {
        assertTrue(l.isHeld());
      }
      LockdException denied =
          assertThrows(LockdException.class, () -> orders.tryAcquire("billing/1", Duration.ZERO));
      assertEquals(Status.Code.PERMISSION_DENIED, denied.code());
    }
  }

  @Test
  void aTokenFileIsReadAgainWhenItChanges() throws Exception {
    Path file = Files.createTempFile("lockd-java-token-", "");
    Files.writeString(file, "not-a-known-token-at-all\n");
    try (LockdClient c = LockdClient.builder().target(lockd.addr).bearerTokenFile(file).build()) {
      LockdException e =
          assertThrows(LockdException.class, () -> c.tryAcquire("orders/2", Duration.ZERO));
      assertEquals(Status.Code.UNAUTHENTICATED, e.code());
      Files.writeString(file, TOKEN + "\n");
      Files.setLastModifiedTime(
          file, java.nio.file.attribute.FileTime.from(Instant.now().plusSeconds(5)));
      c.tryAcquire("orders/2", Duration.ZERO).orElseThrow().close();
    }
  }

  @Test
  void accessTokensAreSharedAndRefreshedOnce() throws Exception {
    try (LockdClient c = LockdClient.builder().target(lockd.addr).bearerToken(TOKEN).build()) {
      TokenClient tokens = c.tokens();
      AccessToken first = tokens.getAccessToken("mp");
      assertFalse(first.token().isEmpty());
      assertTrue(first.expireTime().isAfter(Instant.now()));
      assertFalse(first.toString().contains(first.token()), "toString hides the token");
      assertEquals(first.token(), tokens.getAccessToken("mp").token());

      // A report replaces the token only once the upstream refuses it.
      wechat.reject(first.token());
      AccessToken fresh = tokens.refreshAccessToken("mp", first.token());
      assertNotEquals(first.token(), fresh.token());
      // A second report of the old token gets the new one, without another mint.
      assertEquals(fresh.token(), tokens.refreshAccessToken("mp", first.token()).token());
      assertEquals(fresh.token(), tokens.getAccessToken("mp").token());

      LockdException e = assertThrows(LockdException.class, () -> tokens.getAccessToken("nope"));
      assertEquals(Status.Code.PERMISSION_DENIED, e.code());
    }
  }
}
