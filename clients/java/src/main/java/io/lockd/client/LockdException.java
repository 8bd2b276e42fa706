package io.lockd.client;

import io.grpc.Status;

/**
 * LockdException is a call to lockd that failed: it carries the gRPC status lockd (or the
 * transport) answered with, after any retries the client makes on {@code UNAVAILABLE}.
 */
public class LockdException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final transient Status status;

  /** Creates an exception for a call that ended with status. */
  public LockdException(String message, Status status) {
    super(message + ": " + status.getCode() + describe(status), status.asRuntimeException());
    this.status = status;
  }

  /** Creates an exception with a message and cause but no gRPC status of its own. */
  protected LockdException(String message, Throwable cause, Status status) {
    super(message, cause);
    this.status = status;
  }

  /** The gRPC status the failed call ended with. */
  public Status status() {
    return status;
  }

  /** The gRPC status code the failed call ended with. */
  public Status.Code code() {
    return status.getCode();
  }

  private static String describe(Status s) {
    return s.getDescription() == null ? "" : " " + s.getDescription();
  }
}
