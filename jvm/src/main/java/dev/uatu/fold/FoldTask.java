package dev.uatu.fold;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One Spark task: read its ranges (one per partition, packed by {@link RangeFolds#packed}) with
 * one pooled consumer and return their folds' rows, range by range in the order given.
 */
final class FoldTask implements FlatMapFunction<Iterator<ArrayList<FoldRange>>, Row> {
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
  public Iterator<Row> call(Iterator<ArrayList<FoldRange>> packs) {
    List<Row> rows = new ArrayList<>();
    while (packs.hasNext()) {
      rows.addAll(fold(packs.next()));
    }
    return rows.iterator();
  }

  private List<Row> fold(List<FoldRange> ranges) {
    if (ranges.isEmpty()) {
      return List.of();
    }
    long started = System.nanoTime();
    List<RecordFold> folds = new ArrayList<>(ranges.size());
    Map<TopicPartition, Long> starts = new LinkedHashMap<>();
    for (FoldRange range : ranges) {
      folds.add(factory.create(range));
      starts.put(new TopicPartition(range.topic, range.partition), range.fromOffset);
    }
    long prepared = System.nanoTime();
    PooledConsumer consumer = Consumers.borrow(consumerConfig, starts);
    RangeReader.Read read;
    try {
      read = RangeReader.read(consumer, ranges, folds, timeoutMs);
    } catch (RuntimeException | Error e) {
      Consumers.giveBackFailed(consumerConfig, consumer);
      throw e;
    }
    Consumers.giveBack(consumerConfig, consumer);
    long readDone = System.nanoTime();
    List<Row> rows = new ArrayList<>();
    for (RecordFold fold : folds) {
      rows.addAll(fold.finish());
    }
    long finished = System.nanoTime();
    LOG.info(
        "{}: folded {} records in {} ms (first record after {} ms; fold set-up {} ms, read {} ms,"
            + " finish {} ms)",
        ranges.size() == 1 ? ranges.get(0) : ranges.size() + " ranges from " + ranges.get(0),
        read.records(),
        (finished - started) / 1_000_000,
        read.firstRecordMs(),
        (prepared - started) / 1_000_000,
        (readDone - prepared) / 1_000_000,
        (finished - readDone) / 1_000_000);
    return rows;
  }
}
