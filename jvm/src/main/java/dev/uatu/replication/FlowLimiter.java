package dev.uatu.replication;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.LockSupport;

/**
 * The JobGroup's flow control ({@code messagesPerSec}, {@code bytesPerSec}) applied record by
 * record inside the copy, so the records leave for the destination at an even pace instead of
 * in one burst per micro-batch.
 *
 * <p>A leaky bucket without credit: every record occupies {@code max(1 / messagesPerSec,
 * bytes / bytesPerSec)} seconds of the limiter's time line, starting no earlier than now, and
 * is sent when its slot starts. Over any window of W seconds at most W x cap + one record's
 * worth therefore leaves, whatever happened before: idle time earns nothing to burst with.
 *
 * <p>One limiter per JobGroup and JVM, shared by every copy task of that JobGroup running in
 * the JVM. Each task brings a share of the caps while it runs and the limiter paces at the caps
 * times the sum of the shares present, at most the whole caps. In local mode every task runs in
 * the driver's JVM and brings a share of 1: the JobGroup's whole caps are shared by all its
 * partitions, whichever have records. On a cluster a task brings 1 / (tasks of the job), so
 * the executors together never exceed the caps.
 */
public final class FlowLimiter {
  private static final Map<String, FlowLimiter> LIMITERS = new ConcurrentHashMap<>();

  private final double recordsCap; // records/s, 0 = none
  private final double bytesCap; // bytes/s, 0 = none
  private double shares; // of the tasks present
  private long freeAtNanos; // when the limiter's time line is next free

  private FlowLimiter(double recordsCap, double bytesCap) {
    this.recordsCap = recordsCap;
    this.bytesCap = bytesCap;
  }

  /**
   * Joins the limiter of {@code key} (a JobGroup's caps) with a task's {@code share} of the
   * caps, or returns null when neither cap is set. Call {@link #leave} with the same share when
   * the task ends.
   */
  static FlowLimiter join(String key, double recordsCap, double bytesCap, double share) {
    if (recordsCap <= 0 && bytesCap <= 0) {
      return null;
    }
    FlowLimiter limiter =
        LIMITERS.computeIfAbsent(
            key + "|" + recordsCap + "|" + bytesCap, k -> new FlowLimiter(recordsCap, bytesCap));
    synchronized (limiter) {
      limiter.shares += share;
    }
    return limiter;
  }

  synchronized void leave(double share) {
    shares = Math.max(0, shares - share);
  }

  /**
   * Blocks until a record of {@code bytes} bytes may leave. Interrupted: returns at once with
   * the interrupt flag set (the task is being killed).
   */
  void acquire(long bytes) {
    long start = reserve(bytes, System.nanoTime());
    long wait;
    while ((wait = start - System.nanoTime()) > 0) {
      LockSupport.parkNanos(wait);
      if (Thread.currentThread().isInterrupted()) {
        return;
      }
    }
  }

  /** The time a record of {@code bytes} bytes asked for at {@code nowNanos} may leave. */
  public synchronized long reserve(long bytes, long nowNanos) {
    double fraction = Math.min(1.0, shares);
    double seconds = 0;
    if (recordsCap > 0 && fraction > 0) {
      seconds = 1.0 / (recordsCap * fraction);
    }
    if (bytesCap > 0 && fraction > 0) {
      seconds = Math.max(seconds, bytes / (bytesCap * fraction));
    }
    long start = Math.max(nowNanos, freeAtNanos);
    freeAtNanos = start + (long) (seconds * 1e9);
    return start;
  }

  /** For tests: a limiter of its own at fixed rates, not shared with any task. */
  public static FlowLimiter fixed(double recordsPerSec, double bytesPerSec) {
    FlowLimiter limiter = new FlowLimiter(recordsPerSec, bytesPerSec);
    limiter.shares = 1;
    return limiter;
  }
}
