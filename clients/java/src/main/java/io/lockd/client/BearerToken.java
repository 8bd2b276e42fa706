package io.lockd.client;

import io.grpc.CallCredentials;
import io.grpc.Metadata;
import io.grpc.Status;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.concurrent.Executor;
import java.util.function.Supplier;

/** BearerToken sends {@code authorization: Bearer <token>} with every call. */
final class BearerToken extends CallCredentials {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final Supplier<String> token;

  BearerToken(Supplier<String> token) {
    this.token = token;
  }

  /** A token read from a file, read again whenever the file changes (rotated secrets). */
  static Supplier<String> fromFile(Path file) {
    return new Supplier<>() {
      private FileTime read;
      private String token;

      @Override
      public synchronized String get() {
        try {
          FileTime mtime = Files.getLastModifiedTime(file);
          if (!mtime.equals(read)) {
            token = new String(Files.readAllBytes(file), StandardCharsets.UTF_8).trim();
            read = mtime;
          }
          return token;
        } catch (IOException e) {
          throw new IllegalStateException("reading bearer token file " + file + ": " + e, e);
        }
      }
    };
  }

  @Override
  public void applyRequestMetadata(RequestInfo info, Executor executor, MetadataApplier applier) {
    String t;
    try {
      t = token.get();
    } catch (RuntimeException e) {
      applier.fail(Status.UNAUTHENTICATED.withDescription(e.getMessage()).withCause(e));
      return;
    }
    Metadata headers = new Metadata();
    headers.put(AUTHORIZATION, "Bearer " + t);
    applier.apply(headers);
  }

  @Override
  public void thisUsesUnstableApi() {}
}
