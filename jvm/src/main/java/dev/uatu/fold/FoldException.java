package dev.uatu.fold;

/** A fold task could not read or fold its range; the task, and so the batch, fails. */
public final class FoldException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public FoldException(String message) {
    super(message);
  }

  public FoldException(String message, Throwable cause) {
    super(message, cause);
  }
}
