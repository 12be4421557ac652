package dev.uatu.dispatch;

import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The documented fault hook (env {@code UATU_DISPATCH_FAULT=<step>[:<topic>]}, off by default;
 * see jobs/dispatch/faults.py): at a named step the whole JVM halts at once, as a SIGKILL of
 * the driver would end it (in local mode the executors live in the driver's JVM). It fires once
 * per JVM, at the first match.
 */
public final class Faults {
  private static final Logger LOG = LoggerFactory.getLogger(Faults.class);
  private static final AtomicBoolean FIRED = new AtomicBoolean(false);

  private Faults() {}

  static void at(DispatchConfig config, String step, String topic) {
    if (config.faultStep.isEmpty() || !config.faultStep.equals(step)) {
      return;
    }
    if (!config.faultTopic.isEmpty() && !config.faultTopic.equals(topic)) {
      return;
    }
    if (FIRED.compareAndSet(false, true)) {
      crash(step + " on " + topic);
    }
  }

  /** Halts this JVM now: no shutdown hooks, no flush, nothing committed after this point. */
  public static void crash(String where) {
    LOG.error("UATU_DISPATCH_FAULT: halting the JVM at {}", where);
    System.err.println("UATU_DISPATCH_FAULT: halting the JVM at " + where);
    Runtime.getRuntime().halt(137);
  }
}
