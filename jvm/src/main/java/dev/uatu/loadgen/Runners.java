package dev.uatu.loadgen;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The {@link Runner}s of this JVM, one per partition group of a generator run. A batch's task
 * adopts its group's runner when that runner's last cut is the state the driver planned from
 * (the usual case: same executor, no restart); otherwise it stops it and starts a new one from
 * the plan. Records the old runner sent after its last collected cut are then sent again (at
 * least once).
 */
final class Runners {
  private static final Logger LOG = LoggerFactory.getLogger(Runners.class);
  private static final Map<String, Runner> RUNNING = new ConcurrentHashMap<>();
  private static final long STOP_TIMEOUT_MS = 30_000;

  private Runners() {}

  static synchronized Runner runnerFor(ProduceConfig config, TaskPlan plan)
      throws InterruptedException {
    String key = plan.key(config);
    Runner runner = RUNNING.get(key);
    if (runner != null && runner.continues(plan)) {
      return runner;
    }
    if (runner != null) {
      LOG.info("{}: the plan of batch {} does not continue this runner; restarting it", key,
          plan.batchId);
      runner.stop(STOP_TIMEOUT_MS);
    }
    runner = new Runner(key, config, plan);
    RUNNING.put(key, runner);
    runner.start();
    return runner;
  }

  /** Stops this JVM's runners of generators {@code prefix}*; the rows of their open segments. */
  static synchronized List<Row> stop(String prefix) throws InterruptedException {
    List<Row> rows = new ArrayList<>();
    for (Runner runner : new ArrayList<>(RUNNING.values())) {
      if (runner.key.startsWith(prefix + "|")) {
        rows.addAll(runner.stop(STOP_TIMEOUT_MS));
        RUNNING.remove(runner.key, runner);
      }
    }
    return rows;
  }
}
