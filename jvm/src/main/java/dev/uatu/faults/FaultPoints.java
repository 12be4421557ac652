package dev.uatu.faults;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The JVM half of the fault hook ({@code core/faults.py} documents it and lists the points):
 * off unless the environment variable {@code UATU_FAULT=<point>[@<n>][:<action>][,...]} names
 * a point. The n-th time this JVM reaches the point (default the first), {@code crash} writes
 * one line to stderr and SIGKILLs the JVM's whole process group, as {@code kill -9 -PGID} of a
 * {@code spark-submit.sh} run would; {@code fail-first-attempt} throws {@link FaultInjected}
 * once, so the task's retry goes through; {@code pause=<ms>} sleeps that long, then the step
 * goes on. The variable is read once per JVM.
 */
public final class FaultPoints {
  private static final Logger LOG = LoggerFactory.getLogger(FaultPoints.class);
  private static final String ENV = "UATU_FAULT";
  private static final List<Fault> FAULTS = parse(System.getenv(ENV));
  private static final Map<String, AtomicLong> HITS = new ConcurrentHashMap<>();

  private FaultPoints() {}

  /** A deliberate one-time failure ({@code fail-first-attempt}). */
  public static final class FaultInjected extends RuntimeException {
    private static final long serialVersionUID = 1L;

    FaultInjected(String message) {
      super(message);
    }
  }

  private record Fault(String point, long hit, String action, long pauseMs) {}

  /** Marks the named step; a no-op unless UATU_FAULT names it. */
  public static void hit(String point) {
    FaultInjected failure = failure(point);
    if (failure != null) {
      throw failure;
    }
  }

  /**
   * As {@link #hit}, for a step whose failures are values rather than exceptions (a producer
   * callback): the {@code fail-first-attempt} failure is returned, not thrown; null otherwise.
   */
  public static FaultInjected failure(String point) {
    if (FAULTS.isEmpty()) {
      return null;
    }
    long hit = -1;
    for (Fault fault : FAULTS) {
      if (!fault.point.equals(point)) {
        continue;
      }
      if (hit < 0) {
        hit = HITS.computeIfAbsent(point, p -> new AtomicLong()).incrementAndGet();
      }
      if (fault.hit != hit) {
        continue;
      }
      String where = point + " (hit " + hit + ")";
      if (fault.action.equals("crash")) {
        crash(where);
      }
      if (fault.action.equals("pause")) {
        pause(fault.pauseMs, where);
        continue;
      }
      return new FaultInjected(ENV + ": fail-first-attempt at " + where);
    }
    return null;
  }

  private static void pause(long millis, String where) {
    System.err.println(ENV + ": pause " + millis + " ms at " + where);
    LOG.warn("{}: pause {} ms at {}", ENV, millis, where);
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** One line on stderr, then SIGKILL to this JVM's process group. Never returns. */
  public static void crash(String where) {
    System.err.println(ENV + ": crash at " + where);
    System.err.flush();
    LOG.error("{}: crash at {}", ENV, where);
    try {
      String stat = Files.readString(Path.of("/proc/self/stat"), StandardCharsets.UTF_8);
      // After the command name in parentheses: state, ppid, pgrp, ...
      String pgid = stat.substring(stat.lastIndexOf(')') + 2).split(" ")[2];
      new ProcessBuilder("kill", "-KILL", "--", "-" + pgid)
          .inheritIO()
          .start()
          .waitFor(10, TimeUnit.SECONDS);
    } catch (IOException | RuntimeException e) {
      LOG.error("could not signal the process group; halting the JVM", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    Runtime.getRuntime().halt(137); // without procfs or kill(1): this JVM at least
  }

  private static List<Fault> parse(String text) {
    List<Fault> faults = new ArrayList<>();
    if (text == null) {
      return faults;
    }
    for (String raw : text.split(",")) {
      String entry = raw.strip();
      if (entry.isEmpty()) {
        continue;
      }
      int colon = entry.indexOf(':');
      String target = colon < 0 ? entry : entry.substring(0, colon);
      String action = colon < 0 ? "crash" : entry.substring(colon + 1);
      int at = target.indexOf('@');
      String point = at < 0 ? target : target.substring(0, at);
      long hit = at < 0 ? 1 : Long.parseLong(target.substring(at + 1));
      long pauseMs = 0;
      if (action.startsWith("pause=")) {
        pauseMs = Long.parseLong(action.substring("pause=".length()));
        action = "pause";
      } else if (!action.equals("crash") && !action.equals("fail-first-attempt")) {
        throw new IllegalArgumentException(ENV + ": unknown action in " + entry);
      }
      faults.add(new Fault(point, hit, action, pauseMs));
    }
    return faults;
  }
}
