package dev.uatu.fold;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** One Spark task: read its range(s) with a pooled consumer and return the folds' rows. */
final class FoldTask implements FlatMapFunction<Iterator<FoldRange>, Row> {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(FoldTask.class);

  private final HashMap<String, String> consumerConfig;
  private final FoldFactory factory;
  private final long timeoutMs;

  FoldTask(Map<String, String> consumerConfig, FoldFactory factory, long timeoutMs) {
    this.consumerConfig = new HashMap<>(consumerConfig);
    this.factory = factory;
    this.timeoutMs = timeoutMs;
  }

  @Override
  public Iterator<Row> call(Iterator<FoldRange> ranges) {
    List<Row> rows = new ArrayList<>();
    while (ranges.hasNext()) {
      FoldRange range = ranges.next();
      long started = System.nanoTime();
      RecordFold fold = factory.create(range);
      TopicPartition tp = new TopicPartition(range.topic, range.partition);
      PooledConsumer consumer = Consumers.borrow(consumerConfig, tp, range.fromOffset);
      RangeReader.Read read;
      try {
        read = RangeReader.read(consumer, range, fold, timeoutMs);
      } catch (RuntimeException | Error e) {
        Consumers.giveBackFailed(consumerConfig, consumer);
        throw e;
      }
      Consumers.giveBack(consumerConfig, consumer);
      rows.addAll(fold.finish());
      long ms = (System.nanoTime() - started) / 1_000_000;
      LOG.info(
          "{}: folded {} records in {} ms (first record after {} ms)",
          range, read.records(), ms, read.firstRecordMs());
    }
    return rows.iterator();
  }
}
