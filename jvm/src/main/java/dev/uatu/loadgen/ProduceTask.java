package dev.uatu.loadgen;

import dev.uatu.faults.FaultPoints;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One producer task of one micro-batch: adopts (or starts) the {@link Runner} of its partition
 * group, asks it for the batch's cut and returns, once every record before the cut was
 * acknowledged, one row per partition ({@link #ROW_SCHEMA}). Any failed delivery fails the
 * task, and so the batch and the query; nothing is retried here beyond the producer's own
 * retries.
 */
final class ProduceTask implements FlatMapFunction<Iterator<TaskPlan>, Row> {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(ProduceTask.class);

  static final String ROW_SCHEMA =
      "partition int, first_seq long, next_seq long, records long, duplicates long, late long, "
          + "untimed long, bytes long, value_bytes long, next_due_us long, first_send_us long, "
          + "last_send_us long, deadline_us long, acks long, ack_ms_sum double, "
          + "ack_ms_max double, ack_ms_sketch binary";

  private final ProduceConfig config;

  ProduceTask(ProduceConfig config) {
    this.config = config;
  }

  @Override
  public Iterator<Row> call(Iterator<TaskPlan> plans) throws InterruptedException {
    List<Row> rows = new ArrayList<>();
    while (plans.hasNext()) {
      TaskPlan plan = plans.next();
      long started = System.nanoTime();
      Runner runner = Runners.runnerFor(config, plan);
      runner.requestCut(plan.batchId, plan.windowMicros);
      List<Row> cut = runner.awaitCut(plan.batchId, plan.windowMicros / 1000 + config.ackTimeoutMs);
      // Every record of the cut is acknowledged; the driver has not saved the batch's state.
      FaultPoints.hit("loadgen.batch_acked");
      long records = cut.stream().mapToLong(r -> r.getLong(3)).sum();
      LOG.info(
          "{} batch {}: {} records in {} ms",
          runner.key,
          plan.batchId,
          records,
          (System.nanoTime() - started) / 1_000_000);
      rows.addAll(cut);
    }
    return rows.iterator();
  }
}
