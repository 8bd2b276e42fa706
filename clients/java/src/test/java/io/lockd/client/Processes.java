package io.lockd.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Processes runs what the tests need as real processes on free loopback ports: redis-server,
 * lockd and the fake WeChat upstream. Each is stopped by close (and, should the JVM exit early,
 * by a shutdown hook); nothing else is touched.
 */
final class Processes {
  private static Path lockd;
  private static Path wechatFake;
  private static final List<Process> started = new ArrayList<>();

  static {
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  synchronized (started) {
                    started.forEach(Process::destroyForcibly);
                  }
                }));
  }

  private Processes() {}

  static Path repoRoot() {
    Path p = Path.of("").toAbsolutePath();
    while (p != null && !Files.exists(p.resolve("go.mod"))) {
      p = p.getParent();
    }
    if (p == null) {
      throw new IllegalStateException("no go.mod above " + Path.of("").toAbsolutePath());
    }
    return p;
  }

  static synchronized Path lockdBinary() throws IOException, InterruptedException {
    if (lockd == null) {
      lockd = binary("LOCKD_BIN", "lockd", "./cmd/lockd");
    }
    return lockd;
  }

  static synchronized Path wechatFakeBinary() throws IOException, InterruptedException {
    if (wechatFake == null) {
      wechatFake = binary("WECHAT_FAKE_BIN", "wechat-fake", "./cmd/wechat-fake");
    }
    return wechatFake;
  }

  private static Path binary(String env, String name, String pkg)
      throws IOException, InterruptedException {
    String given = System.getenv(env);
    if (given != null && !given.isEmpty()) {
      return Path.of(given).toAbsolutePath();
    }
    Path out = Files.createTempDirectory("lockd-java-").resolve(name);
    Process p =
        new ProcessBuilder("go", "build", "-o", out.toString(), pkg)
            .directory(repoRoot().toFile())
            .inheritIO()
            .start();
    if (p.waitFor() != 0) {
      throw new IllegalStateException("go build " + pkg + " failed");
    }
    return out;
  }

  static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket()) {
      s.bind(new InetSocketAddress("127.0.0.1", 0));
      return s.getLocalPort();
    }
  }

  /** Server is one process this harness started. */
  abstract static class Server implements AutoCloseable {
    final Process process;
    final Path log;

    Server(List<String> cmd, String name) throws IOException {
      this(cmd, name, Map.of());
    }

    Server(List<String> cmd, String name, Map<String, String> env) throws IOException {
      log = Files.createTempFile("lockd-java-" + name + "-", ".log");
      ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile());
      pb.environment().putAll(env);
      process = pb.start();
      synchronized (started) {
        started.add(process);
      }
    }

    /** Stops the process (SIGSTOP): it keeps its sockets but answers nothing. */
    void freeze() throws IOException, InterruptedException {
      signal("STOP");
    }

    /** Lets a frozen process go on (SIGCONT). */
    void resume() throws IOException, InterruptedException {
      signal("CONT");
    }

    /** Kills the process at once (SIGKILL). */
    void kill() throws InterruptedException {
      process.destroyForcibly();
      process.waitFor();
    }

    /** Asks the process to shut down (SIGTERM) and waits for it. */
    void terminate() throws InterruptedException {
      process.destroy();
      if (!process.waitFor(30, TimeUnit.SECONDS)) {
        throw new IllegalStateException("did not exit after SIGTERM; log " + log);
      }
    }

    private void signal(String sig) throws IOException, InterruptedException {
      int rc = new ProcessBuilder("kill", "-" + sig, Long.toString(process.pid())).start().waitFor();
      if (rc != 0) {
        throw new IllegalStateException("kill -" + sig + " failed");
      }
    }

    String logs() {
      try {
        return Files.readString(log);
      } catch (IOException e) {
        return "(no log: " + e + ")";
      }
    }

    @Override
    public void close() {
      if (process.isAlive()) {
        try {
          resume();
        } catch (IOException | IllegalStateException e) {
          // Already gone.
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        process.destroyForcibly();
        try {
          process.waitFor();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      synchronized (started) {
        started.remove(process);
      }
    }

    static void waitUntil(String what, Server s, Check check) throws Exception {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (!check.ok()) {
        if (!s.process.isAlive()) {
          throw new IllegalStateException(what + " exited:\n" + s.logs());
        }
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException(what + " not ready in 30s:\n" + s.logs());
        }
        Thread.sleep(50);
      }
    }

    interface Check {
      boolean ok();
    }
  }

  /** Redis is a redis-server without persistence. */
  static final class Redis extends Server {
    final int port;

    private Redis(int port) throws IOException {
      super(
          List.of(
              "redis-server", "--port", Integer.toString(port), "--bind", "127.0.0.1",
              "--save", "", "--appendonly", "no"),
          "redis");
      this.port = port;
    }

    static Redis start() throws Exception {
      Redis r = new Redis(freePort());
      waitUntil("redis-server", r, r::pong);
      return r;
    }

    String addr() {
      return "127.0.0.1:" + port;
    }

    private boolean pong() {
      try (Socket s = new Socket("127.0.0.1", port)) {
        s.setSoTimeout(1000);
        OutputStream out = s.getOutputStream();
        out.write("PING\r\n".getBytes(StandardCharsets.US_ASCII));
        out.flush();
        byte[] buf = new byte[7];
        InputStream in = s.getInputStream();
        int n = in.read(buf);
        return n > 0 && new String(buf, 0, n, StandardCharsets.US_ASCII).startsWith("+PONG");
      } catch (IOException e) {
        return false;
      }
    }
  }

  /** Lockd is one lockd process. */
  static final class Lockd extends Server {
    final String addr;
    final String http;

    private Lockd(String addr, String http, List<String> cmd, Map<String, String> env)
        throws IOException {
      super(cmd, "lockd", env);
      this.addr = addr;
      this.http = http;
    }

    /** Starts lockd on redis with extra flags and waits until /readyz answers 200. */
    static Lockd start(Redis redis, String... flags) throws Exception {
      return start(redis, Map.of(), flags);
    }

    /** Starts lockd with extra environment variables. */
    static Lockd start(Redis redis, Map<String, String> env, String... flags) throws Exception {
      String addr = "127.0.0.1:" + freePort();
      String http = "127.0.0.1:" + freePort();
      List<String> cmd = new ArrayList<>();
      cmd.add(lockdBinary().toString());
      cmd.add("--listen=" + addr);
      cmd.add("--http-listen=" + http);
      cmd.add("--redis=" + redis.addr());
      cmd.addAll(List.of(flags));
      Lockd l = new Lockd(addr, http, cmd, env);
      waitUntil("lockd", l, l::ready);
      return l;
    }

    private boolean ready() {
      try {
        HttpURLConnection c = (HttpURLConnection) new URL("http://" + http + "/readyz").openConnection();
        c.setConnectTimeout(1000);
        c.setReadTimeout(1000);
        try {
          return c.getResponseCode() == 200;
        } finally {
          c.disconnect();
        }
      } catch (IOException e) {
        return false;
      }
    }
  }

  /** WeChatFake is the fake WeChat token upstream. */
  static final class WeChatFake extends Server {
    final String base;

    private WeChatFake(String base, List<String> cmd) throws IOException {
      super(cmd, "wechat-fake");
      this.base = base;
    }

    /** reject makes the upstream refuse tok from now on, as if another system replaced it. */
    void reject(String tok) throws IOException {
      java.net.HttpURLConnection c =
          (java.net.HttpURLConnection)
              java.net.URI.create(
                      base
                          + "/fake/reject?access_token="
                          + java.net.URLEncoder.encode(tok, java.nio.charset.StandardCharsets.UTF_8))
                  .toURL()
                  .openConnection();
      try {
        c.setRequestMethod("POST");
        if (c.getResponseCode() != 204) {
          throw new IOException("wechat-fake: POST /fake/reject: HTTP " + c.getResponseCode());
        }
      } finally {
        c.disconnect();
      }
    }

    static WeChatFake start(String appAndSecret) throws Exception {
      int port = freePort();
      WeChatFake w =
          new WeChatFake(
              "http://127.0.0.1:" + port,
              List.of(
                  wechatFakeBinary().toString(), "--listen=127.0.0.1:" + port, "--app", appAndSecret));
      waitUntil("wechat-fake", w, () -> listening(port));
      return w;
    }

    private static boolean listening(int port) {
      try (Socket s = new Socket("127.0.0.1", port)) {
        return s.isConnected();
      } catch (IOException e) {
        return false;
      }
    }
  }
}
