package dev.uatu.dispatch;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/**
 * uForwarder's {@code uber.data.kafka.consumer.DLQMetadata}, the key of every record written to
 * a retry, DLQ or resilience-queue topic, encoded and decoded by hand (proto3 wire format: the
 * fields in number order, zero values omitted) so the dispatcher needs no protobuf runtime. The
 * bytes equal what protobuf's own serializer writes for the same message; a test compares them
 * with Python's generated class.
 *
 * <pre>
 *   1 retry_count int64   2 topic string   3 partition int32   4 offset int64
 *   5 timestamp_ns int64 (milliseconds, despite the name)   6 data bytes (the original key)
 *   7 timeout_count int64
 * </pre>
 */
public final class DlqMetadata {
  public final long retryCount;
  public final String topic;
  public final int partition;
  public final long offset;
  public final long timestampMs;
  public final byte[] data; // the original record key; null when the original key was null
  public final long timeoutCount;

  public DlqMetadata(
      long retryCount,
      String topic,
      int partition,
      long offset,
      long timestampMs,
      byte[] data,
      long timeoutCount) {
    this.retryCount = retryCount;
    this.topic = topic;
    this.partition = partition;
    this.offset = offset;
    this.timestampMs = timestampMs;
    this.data = data;
    this.timeoutCount = timeoutCount;
  }

  /** The proto3 encoding (what uForwarder writes as the record key). */
  public byte[] encode() {
    ByteArrayOutputStream out = new ByteArrayOutputStream(32 + (data == null ? 0 : data.length));
    if (retryCount != 0) {
      tag(out, 1, 0);
      varint(out, retryCount);
    }
    if (!topic.isEmpty()) {
      lengthDelimited(out, 2, topic.getBytes(StandardCharsets.UTF_8));
    }
    if (partition != 0) {
      tag(out, 3, 0);
      varint(out, partition); // int32: negative values are sign-extended to 10 bytes
    }
    if (offset != 0) {
      tag(out, 4, 0);
      varint(out, offset);
    }
    if (timestampMs != 0) {
      tag(out, 5, 0);
      varint(out, timestampMs);
    }
    if (data != null && data.length > 0) {
      lengthDelimited(out, 6, data);
    }
    if (timeoutCount != 0) {
      tag(out, 7, 0);
      varint(out, timeoutCount);
    }
    return out.toByteArray();
  }

  /**
   * Decodes a key; null when the bytes are not a well-formed DLQMetadata (a truncated field, a
   * wire type that does not match a known field, a topic that is not UTF-8). Unknown fields are
   * skipped, as protobuf does.
   */
  public static DlqMetadata decode(byte[] bytes) {
    if (bytes == null) {
      return null;
    }
    long retryCount = 0;
    String topic = "";
    int partition = 0;
    long offset = 0;
    long timestamp = 0;
    byte[] data = null;
    long timeouts = 0;
    int[] pos = {0};
    try {
      while (pos[0] < bytes.length) {
        long key = readVarint(bytes, pos);
        int field = (int) (key >>> 3);
        int wire = (int) (key & 7);
        if (field == 0) {
          return null;
        }
        boolean varintField = field == 1 || field == 3 || field == 4 || field == 5 || field == 7;
        boolean bytesField = field == 2 || field == 6;
        if ((varintField && wire != 0) || (bytesField && wire != 2)) {
          return null;
        }
        switch (field) {
          case 1 -> retryCount = readVarint(bytes, pos);
          case 2 -> topic = utf8(readBytes(bytes, pos));
          case 3 -> partition = (int) readVarint(bytes, pos);
          case 4 -> offset = readVarint(bytes, pos);
          case 5 -> timestamp = readVarint(bytes, pos);
          case 6 -> data = readBytes(bytes, pos);
          case 7 -> timeouts = readVarint(bytes, pos);
          default -> skip(bytes, pos, wire);
        }
      }
    } catch (IllegalArgumentException | ArrayIndexOutOfBoundsException e) {
      return null;
    }
    return new DlqMetadata(retryCount, topic, partition, offset, timestamp, data, timeouts);
  }

  private static String utf8(byte[] raw) {
    var decoder = StandardCharsets.UTF_8.newDecoder();
    try {
      return decoder.decode(java.nio.ByteBuffer.wrap(raw)).toString();
    } catch (java.nio.charset.CharacterCodingException e) {
      throw new IllegalArgumentException("topic is not UTF-8", e);
    }
  }

  private static void tag(ByteArrayOutputStream out, int field, int wire) {
    varint(out, ((long) field << 3) | wire);
  }

  private static void lengthDelimited(ByteArrayOutputStream out, int field, byte[] value) {
    tag(out, field, 2);
    varint(out, value.length);
    out.write(value, 0, value.length);
  }

  private static void varint(ByteArrayOutputStream out, long value) {
    while ((value & ~0x7FL) != 0) {
      out.write((int) ((value & 0x7F) | 0x80));
      value >>>= 7;
    }
    out.write((int) value);
  }

  private static long readVarint(byte[] bytes, int[] pos) {
    long result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      byte b = bytes[pos[0]++];
      result |= (long) (b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        return result;
      }
    }
    throw new IllegalArgumentException("varint longer than 10 bytes");
  }

  private static byte[] readBytes(byte[] bytes, int[] pos) {
    long length = readVarint(bytes, pos);
    if (length < 0 || length > bytes.length - pos[0]) {
      throw new IllegalArgumentException("length beyond the end");
    }
    byte[] value = new byte[(int) length];
    System.arraycopy(bytes, pos[0], value, 0, (int) length);
    pos[0] += (int) length;
    return value;
  }

  private static void skip(byte[] bytes, int[] pos, int wire) {
    switch (wire) {
      case 0 -> readVarint(bytes, pos);
      case 1 -> pos[0] += 8;
      case 2 -> readBytes(bytes, pos);
      case 5 -> pos[0] += 4;
      default -> throw new IllegalArgumentException("wire type " + wire);
    }
    if (pos[0] > bytes.length) {
      throw new IllegalArgumentException("field beyond the end");
    }
  }
}
