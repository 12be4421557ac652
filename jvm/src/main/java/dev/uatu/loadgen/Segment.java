package dev.uatu.loadgen;

import dev.uatu.sketch.KllSketches;
import dev.uatu.fold.MicroClock;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.datasketches.kll.KllDoublesSketch;
import org.apache.kafka.clients.producer.Callback;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * What one partition's generator sent between two cuts (one micro-batch's share), and the acks
 * of those records. The generator thread counts the sends; the producer's I/O thread, alone,
 * the acks; the task that collects the segment reads both after {@link #acked} says every ack
 * is in.
 */
final class Segment {
  final int partition;
  final long firstSeq;
  long nextSeq;
  long records;
  long duplicates;
  long late;
  long untimed;
  long bytes;
  long valueBytes;
  long firstSendMicros = -1;
  long lastSendMicros = -1;
  long nextDueMicros; // set at the cut: the schedule time of the partition's next record
  long deadlineMicros = Long.MAX_VALUE; // set at the cut: the generator's end, if bounded

  private final AtomicLong completed = new AtomicLong();
  private final AtomicReference<Exception> error;
  private final KllDoublesSketch ackMs = KllSketches.doubles();
  private double ackMsSum;
  private double ackMsMax;
  private long acks;

  Segment(int partition, long firstSeq, AtomicReference<Exception> error) {
    this.partition = partition;
    this.firstSeq = firstSeq;
    this.nextSeq = firstSeq;
    this.error = error;
  }

  void sent(long sendMicros, int keyBytes, int valueLength) {
    if (firstSendMicros < 0) {
      firstSendMicros = sendMicros;
    }
    lastSendMicros = sendMicros;
    records++;
    bytes += keyBytes + valueLength;
    valueBytes += valueLength;
  }

  /** The ack callback of a record sent now. */
  Callback callback() {
    final long sentNanos = System.nanoTime();
    return (metadata, exception) -> {
      if (exception != null) {
        error.compareAndSet(null, exception);
      } else {
        double ms = (System.nanoTime() - sentNanos) / 1e6;
        ackMs.update(ms);
        ackMsSum += ms;
        ackMsMax = Math.max(ackMsMax, ms);
        acks++;
      }
      completed.incrementAndGet(); // after the figures' writes, which the collector then sees
    };
  }

  /** Every record of the (closed) segment was acknowledged or failed. */
  boolean acked() {
    return completed.get() >= records;
  }

  /** The segment's row ({@link ProduceTask#ROW_SCHEMA}); call once {@link #acked}. */
  Row row() {
    return RowFactory.create(
        partition,
        firstSeq,
        nextSeq,
        records,
        duplicates,
        late,
        untimed,
        bytes,
        valueBytes,
        nextDueMicros,
        firstSendMicros,
        lastSendMicros,
        deadlineMicros,
        acks,
        ackMsSum,
        ackMsMax,
        ackMs.isEmpty() ? null : ackMs.toByteArray());
  }

  static long nowMicros() {
    return MicroClock.nowMicros();
  }
}
