package dev.uatu.loadgen;

/** A load generator task failed (a delivery, a missing ack); the batch fails with it. */
public final class LoadGenException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public LoadGenException(String message) {
    super(message);
  }

  public LoadGenException(String message, Throwable cause) {
    super(message, cause);
  }
}
