package dev.uatu.loadgen;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

/**
 * The one header every generated record carries, {@code loadgen}: its sequence number (8
 * bytes, big-endian), its send time (epoch microseconds, 8 bytes, big-endian) and the
 * generator id (UTF-8, the rest of the value). One header rather than three: the producer
 * sizes and encodes every header key of every record.
 */
public final class LoadGenHeader {
  public static final String NAME = "loadgen";
  static final int FIXED_BYTES = 16;
  private static final VarHandle BIG_ENDIAN_LONG =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);

  private LoadGenHeader() {}

  static byte[] encode(long seq, long sendMicros, byte[] generator) {
    byte[] value = new byte[FIXED_BYTES + generator.length];
    putLong(value, 0, seq);
    putLong(value, 8, sendMicros);
    System.arraycopy(generator, 0, value, FIXED_BYTES, generator.length);
    return value;
  }

  static boolean valid(byte[] value) {
    return value != null && value.length >= FIXED_BYTES;
  }

  static long seq(byte[] value) {
    return getLong(value, 0);
  }

  static long sendMicros(byte[] value) {
    return getLong(value, 8);
  }

  static String generator(byte[] value) {
    return new String(value, FIXED_BYTES, value.length - FIXED_BYTES, StandardCharsets.UTF_8);
  }

  static void putLong(byte[] b, int at, long v) {
    for (int i = 7; i >= 0; i--) {
      b[at + i] = (byte) v;
      v >>>= 8;
    }
  }

  static long getLong(byte[] b, int at) {
    return (long) BIG_ENDIAN_LONG.get(b, at); // one load, not eight
  }
}
