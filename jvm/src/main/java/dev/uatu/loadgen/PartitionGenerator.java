package dev.uatu.loadgen;

import dev.uatu.fold.MicroClock;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;

/**
 * The generator of one partition: makes its records (a pure function of seed, partition and
 * sequence number, plus the send time), keeps its schedule, and counts what it sent in the open
 * {@link Segment}, which a cut closes. Used by one {@link Runner} thread only.
 */
final class PartitionGenerator {
  private static final long GOLDEN = 0x9E3779B97F4A7C15L;
  private static final int KIND_ON_TIME = 0;
  private static final int KIND_LATE = 1;
  private static final int KIND_UNTIMED = 2;

  final int partition;
  private final ProduceConfig config;
  private final RecordShape shape;
  private final byte[] generator;
  private final byte[] letters; // shared, read-only
  private final long base;
  private final AtomicReference<Exception> error;

  long nextSeq;
  long quota;
  double dueNanos; // schedule time of the next record (paced runs)
  final long deadlineNanos; // Long.MAX_VALUE: none; schedule (paced) or wall time

  // The original the pending duplicates re-send.
  private int pendingDuplicates;
  private long lastSeq;
  private byte[] lastKey;
  private byte[] lastValue;
  private long lastTimestamp;
  private int lastKind;

  Segment segment; // what was sent since the last cut
  long closedUpTo = Long.MIN_VALUE; // the batch of the last cut
  final Map<Long, Segment> closed = new ConcurrentHashMap<>();

  PartitionGenerator(
      ProduceConfig config,
      PartitionPlan plan,
      byte[] letters,
      long startNanos,
      AtomicReference<Exception> error) {
    this.partition = plan.partition;
    this.config = config;
    this.shape = config.shape;
    this.generator = (config.generatorPrefix + plan.partition).getBytes(StandardCharsets.UTF_8);
    this.letters = letters;
    this.base = mix(shape.seed * GOLDEN + plan.partition);
    this.error = error;
    this.nextSeq = plan.nextSeq;
    this.quota = plan.quota;
    this.dueNanos =
        config.paced() && plan.dueMicros > 0 ? MicroClock.toNanos(plan.dueMicros) : startNanos;
    if (plan.deadlineMicros == Long.MAX_VALUE) {
      this.deadlineNanos = Long.MAX_VALUE;
    } else if (plan.deadlineMicros < 0) {
      this.deadlineNanos = (long) dueNanos - plan.deadlineMicros * 1000L; // that long from now
    } else {
      this.deadlineNanos = MicroClock.toNanos(plan.deadlineMicros);
    }
    this.segment = new Segment(partition, nextSeq, error);
  }

  /** Where the generator is: its next record's schedule time (paced), or now (unpaced). */
  long position(long now) {
    return config.paced() ? (long) dueNanos : now;
  }

  boolean done(long now) {
    return quota <= 0 || position(now) >= deadlineNanos;
  }

  /** Closes the open segment as batch {@code batch}'s share. */
  void cut(long batch) {
    segment.nextSeq = nextSeq;
    segment.nextDueMicros = MicroClock.toMicros((long) dueNanos);
    segment.deadlineMicros =
        deadlineNanos == Long.MAX_VALUE ? Long.MAX_VALUE : MicroClock.toMicros(deadlineNanos);
    closed.put(batch, segment);
    closedUpTo = batch;
    segment = new Segment(partition, nextSeq, error);
  }

  /**
   * Makes the next record (a duplicate of the last original while some are pending), counts it
   * in the open segment and advances the schedule by its cost.
   */
  ProducerRecord<byte[], byte[]> next() {
    if (pendingDuplicates == 0) {
      makeOriginal();
    } else {
      pendingDuplicates--;
      segment.duplicates++;
    }
    long sendMicros = MicroClock.nowMicros();
    int keyLength = lastKey == null ? 0 : lastKey.length;
    segment.sent(sendMicros, keyLength, lastValue.length);
    quota--;
    if (lastKind == KIND_LATE) {
      segment.late++;
    } else if (lastKind == KIND_UNTIMED) {
      segment.untimed++;
    }
    if (config.paced()) {
      dueNanos += config.costNanos(keyLength + lastValue.length);
    }
    Header header =
        new RecordHeader(
            LoadGenHeader.NAME, LoadGenHeader.encode(lastSeq, sendMicros, generator));
    // A plain list: ProducerRecord copies what it is given into RecordHeaders of its own, so
    // a RecordHeaders built here would be built twice (a tenth of the sending thread's samples).
    return new ProducerRecord<>(
        config.topic, partition, lastTimestamp, lastKey, lastValue, List.of(header));
  }

  private void makeOriginal() {
    long seq = nextSeq++;
    long h = mix(base ^ (seq * GOLDEN));
    double uKind = unit(mix(h + 1));
    int size = shape.size(unit(mix(h + 2)));
    long sendMs = System.currentTimeMillis();
    int kind =
        uKind < shape.untimedRatio
            ? KIND_UNTIMED
            : uKind < shape.untimedRatio + shape.lateRatio ? KIND_LATE : KIND_ON_TIME;
    long eventMs = kind == KIND_LATE ? sendMs - shape.latenessMs : sendMs;
    lastSeq = seq;
    lastKind = kind;
    lastKey =
        shape.keyCardinality > 0
            ? key(Long.remainderUnsigned(mix(h + 3), shape.keyCardinality))
            : null;
    int offset = (int) ((mix(h + 5) >>> 1) % (letters.length - shape.maxSize()));
    if (shape.jsonField == null) {
      lastValue = Arrays.copyOfRange(letters, offset, offset + size);
      for (int i = 0; i < Math.min(8, size); i++) {
        lastValue[i] = (byte) (seq >>> (56 - 8 * i));
      }
      lastTimestamp = kind == KIND_UNTIMED ? 0L : eventMs;
    } else {
      lastValue = json(seq, kind, eventMs, size, offset);
      lastTimestamp = sendMs;
    }
    pendingDuplicates = shape.duplicates(unit(mix(h + 4)));
  }

  /**
   * {"seq":N,"<field>":<event ms>,"pad":"LETTERS"} padded to {@code size} bytes; an untimed
   * record has no event-time field (even seq) or "n/a" in it (odd seq).
   */
  private byte[] json(long seq, int kind, long eventMs, int size, int offset) {
    StringBuilder head = new StringBuilder(64).append("{\"seq\":").append(seq);
    if (kind != KIND_UNTIMED) {
      head.append(",\"").append(shape.jsonField).append("\":").append(eventMs);
    } else if ((seq & 1) == 1) {
      head.append(",\"").append(shape.jsonField).append("\":\"n/a\"");
    }
    head.append(",\"pad\":\"");
    byte[] prefix = head.toString().getBytes(StandardCharsets.UTF_8);
    int pad = Math.max(0, size - prefix.length - 2);
    byte[] value = new byte[prefix.length + pad + 2];
    System.arraycopy(prefix, 0, value, 0, prefix.length);
    System.arraycopy(letters, offset, value, prefix.length, pad);
    value[value.length - 2] = '"';
    value[value.length - 1] = '}';
    return value;
  }

  private static byte[] key(long n) {
    return ("k" + n).getBytes(StandardCharsets.US_ASCII);
  }

  static long mix(long z) {
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }

  static double unit(long h) {
    return (h >>> 11) * 0x1.0p-53;
  }
}
