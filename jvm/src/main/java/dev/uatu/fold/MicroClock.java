package dev.uatu.fold;

/**
 * Epoch time in microseconds: the wall clock read once, advanced by {@link System#nanoTime}.
 * Cheap enough to read per record, and finer than {@link System#currentTimeMillis}; two JVMs
 * on one machine agree to within the wall clock's own resolution.
 */
public final class MicroClock {
  private static final long BASE_MICROS = System.currentTimeMillis() * 1000L;
  private static final long BASE_NANOS = System.nanoTime();

  private MicroClock() {}

  public static long nowMicros() {
    return BASE_MICROS + (System.nanoTime() - BASE_NANOS) / 1000L;
  }

  /** The epoch microsecond at which {@link System#nanoTime} will read (or read) {@code nanos}. */
  public static long toMicros(long nanos) {
    return BASE_MICROS + (nanos - BASE_NANOS) / 1000L;
  }

  /** The {@link System#nanoTime} reading at epoch microsecond {@code micros}. */
  public static long toNanos(long micros) {
    return BASE_NANOS + (micros - BASE_MICROS) * 1000L;
  }
}
