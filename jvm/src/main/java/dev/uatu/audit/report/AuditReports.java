package dev.uatu.audit.report;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import org.apache.datasketches.hll.HllSketch;
import org.apache.datasketches.hll.TgtHllType;

/**
 * The wire encoding of {@code uatu.v1.AuditReport} (proto/uatu/v1/audit_report.proto), written
 * by hand: a client application need not carry protobuf-java for one small message.
 */
public final class AuditReports {
  public static final int TIER_SERVICE = 1;
  public static final int TIER_KRP = 2;
  public static final int TIER_CONSUMER = 3;

  private AuditReports() {}

  /** Who reports. */
  public record Reporter(
      String service, String host, String instanceId, int tier, String consumerGroup) {}

  /** One serialized AuditReport of a (topic, window) increment. */
  public static byte[] encode(
      Reporter reporter,
      String cluster,
      AuditTally.Window window,
      int windowSeconds,
      AuditTally.Counts counts,
      int lgK,
      long sequence,
      long sentAtMs) {
    Writer r = new Writer();
    r.string(1, reporter.service());
    r.string(2, reporter.host());
    r.string(3, reporter.instanceId());
    r.varint(4, reporter.tier());
    r.string(5, reporter.consumerGroup());
    Writer w = new Writer();
    w.bytes(1, r.out.toByteArray());
    w.string(2, cluster);
    w.string(3, window.topic());
    w.varint(4, window.startMs());
    w.varint(5, windowSeconds);
    w.varint(6, counts.messages);
    w.varint(7, counts.bytes);
    w.varint(8, counts.failed);
    HllSketch hll = counts.hll != null ? counts.hll : new HllSketch(lgK, TgtHllType.HLL_8);
    w.bytes(9, hll.toCompactByteArray());
    if (counts.kll != null) {
      w.bytes(10, counts.kll.toByteArray());
    }
    w.varint(11, sequence);
    w.varint(12, sentAtMs);
    return w.out.toByteArray();
  }

  private static final class Writer {
    final ByteArrayOutputStream out = new ByteArrayOutputStream();

    void raw(long value) {
      while ((value & ~0x7FL) != 0) {
        out.write((int) ((value & 0x7F) | 0x80));
        value >>>= 7;
      }
      out.write((int) value);
    }

    void varint(int field, long value) {
      if (value == 0) {
        return; // proto3: a zero is not written
      }
      raw((long) field << 3);
      raw(value);
    }

    void bytes(int field, byte[] value) {
      if (value == null || value.length == 0) {
        return;
      }
      raw(((long) field << 3) | 2);
      raw(value.length);
      out.write(value, 0, value.length);
    }

    void string(int field, String value) {
      if (value != null) {
        bytes(field, value.getBytes(StandardCharsets.UTF_8));
      }
    }
  }
}
