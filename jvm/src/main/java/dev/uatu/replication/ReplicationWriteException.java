package dev.uatu.replication;

/** A record could not be copied; the task (and the micro-batch) fail instead of losing it. */
public final class ReplicationWriteException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public ReplicationWriteException(String message) {
    super(message);
  }

  public ReplicationWriteException(String message, Throwable cause) {
    super(message, cause);
  }
}
