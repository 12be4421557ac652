package dev.uatu.fold;

import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.sql.Row;

/**
 * What a job computes from the records of one offset range, without a Spark row per record:
 * {@link RangeReader} hands it every record of the range in offset order, then asks for its
 * result rows (partial aggregates: counts, sketches, per-window figures).
 */
public interface RecordFold {
  /**
   * One record of the range. {@code fetchMicros} is when the poll that returned it came back
   * (epoch microseconds, {@link MicroClock}); every record of one poll has the same.
   */
  void add(ConsumerRecord<byte[], byte[]> record, long fetchMicros);

  /** The result rows, after the last record of the range. */
  List<Row> finish();
}
