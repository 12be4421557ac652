package dev.uatu.faults;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The JVM half of the fault hook ({@code core/faults.py} documents it and lists the points):
 * off unless the environment variable {@code UATU_FAULT=<point>[/<scope>][@<n>][:<action>][,...]}
 * names a point. The n-th time this JVM reaches the point (in that scope, when one is given;
 * default the first), {@code crash} writes one line to stderr and SIGKILLs the JVM's whole
 * process group, as {@code kill -9 -PGID} of a {@code spark-submit.sh} run would; {@code
 * fail-first-attempt} throws {@link FaultInjected} once, so the task's retry goes through;
 * {@code pause=<ms>} sleeps that long, then the step goes on. The variable is read once per JVM,
 * with core/faults.py's grammar (tests/core/test_faults.py runs both parsers on one table of
 * values through {@link #main}); the job refused a value naming an unknown point before this
 * JVM started.
 */
public final class FaultPoints {
  private static final Logger LOG = LoggerFactory.getLogger(FaultPoints.class);
  private static final String ENV = "UATU_FAULT";
  // The grammar's patterns, initialised before FAULTS, whose parse uses them.
  private static final Pattern NAME = Pattern.compile("[A-Za-z0-9._-]+");
  private static final Pattern COUNT = Pattern.compile("[0-9]+");
  private static final Pattern BLANKS = Pattern.compile("\\A[ \\t]+|[ \\t]+\\z");
  private static final List<Fault> FAULTS = parse(System.getenv(ENV));
  private static final Map<String, AtomicLong> HITS = new ConcurrentHashMap<>(); // per target

  private FaultPoints() {}

  /** A deliberate one-time failure ({@code fail-first-attempt}). */
  public static final class FaultInjected extends RuntimeException {
    private static final long serialVersionUID = 1L;

    FaultInjected(String message) {
      super(message);
    }
  }

  private record Fault(String point, String scope, long hit, String action, long pauseMs) {
    /** What the fault counts hits of, and names in its lines: {@code <point>[/<scope>]}. */
    String target() {
      return scope.isEmpty() ? point : point + "/" + scope;
    }

    @Override
    public String toString() {
      return target() + "@" + hit + ":" + (action.equals("pause") ? "pause=" + pauseMs : action);
    }
  }

  /** Marks the named step; a no-op unless UATU_FAULT names it. */
  public static void hit(String point) {
    hit(point, "");
  }

  /** Marks the named step of a point with a scope (core/faults.py's Point.scope). */
  public static void hit(String point, String scope) {
    FaultInjected failure = failure(point, scope);
    if (failure != null) {
      throw failure;
    }
  }

  /**
   * As {@link #hit}, for a step whose failures are values rather than exceptions (a producer
   * callback): the {@code fail-first-attempt} failure is returned, not thrown; null otherwise.
   */
  public static FaultInjected failure(String point) {
    return failure(point, "");
  }

  private static FaultInjected failure(String point, String scope) {
    if (FAULTS.isEmpty()) {
      return null;
    }
    Map<String, Long> counted = new HashMap<>();
    for (Fault fault : FAULTS) {
      if (!fault.point.equals(point) || !(fault.scope.isEmpty() || fault.scope.equals(scope))) {
        continue;
      }
      // One hit counts once for each target it is a hit of: the point's, the point's in scope.
      long hit =
          counted.computeIfAbsent(
              fault.target(),
              t -> HITS.computeIfAbsent(t, k -> new AtomicLong()).incrementAndGet());
      if (fault.hit != hit) {
        continue;
      }
      String where = fault.target() + " (hit " + hit + ")";
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

  /**
   * UATU_FAULT's value -> its faults, by core/faults.py's grammar less the list of points;
   * IllegalArgumentException naming the bad entry.
   */
  private static List<Fault> parse(String text) {
    List<Fault> faults = new ArrayList<>();
    if (text == null) {
      return faults;
    }
    for (String raw : text.split(",", -1)) {
      String entry = BLANKS.matcher(raw).replaceAll(""); // spaces and tabs, as core/faults.py
      if (!entry.isEmpty()) {
        faults.add(parseEntry(entry));
      }
    }
    return faults;
  }

  private static Fault parseEntry(String entry) {
    int colon = entry.indexOf(':');
    String target = colon < 0 ? entry : entry.substring(0, colon);
    String action = colon < 0 ? "crash" : entry.substring(colon + 1);
    int at = target.indexOf('@');
    String head = at < 0 ? target : target.substring(0, at);
    int slash = head.indexOf('/');
    String point = slash < 0 ? head : head.substring(0, slash);
    String scope = slash < 0 ? "" : head.substring(slash + 1);
    if (!NAME.matcher(point).matches()) {
      throw bad(entry, "the point must be of [A-Za-z0-9._-]+");
    }
    if (slash >= 0 && !NAME.matcher(scope).matches()) {
      throw bad(entry, "/<scope> must be of [A-Za-z0-9._-]+ (a topic)");
    }
    long hit = at < 0 ? 1 : count(target.substring(at + 1), 1, entry, "@n");
    int equals = action.indexOf('=');
    String name = equals < 0 ? action : action.substring(0, equals);
    long pauseMs = 0;
    if (name.equals("pause") && equals >= 0) {
      pauseMs = count(action.substring(equals + 1), 0, entry, "pause=<ms>");
    } else if (equals >= 0 || !(name.equals("crash") || name.equals("fail-first-attempt"))) {
      throw bad(entry, "the action must be crash, fail-first-attempt or pause=<ms>");
    }
    return new Fault(point, scope, hit, name, pauseMs);
  }

  /** A whole number from {@code least} to Long.MAX_VALUE in ASCII digits, as Python's. */
  private static long count(String text, long least, String entry, String what) {
    try {
      if (COUNT.matcher(text).matches()) {
        long n = Long.parseLong(text);
        if (n >= least) {
          return n;
        }
      }
    } catch (NumberFormatException e) {
      // more than 2^63-1: refused below, as core/faults.py refuses it
    }
    throw bad(entry, what + " must be a whole number from " + least + " to 2^63-1");
  }

  private static IllegalArgumentException bad(String entry, String reason) {
    return new IllegalArgumentException(ENV + ": '" + entry + "': " + reason);
  }

  /**
   * The test entry of the hook (tests/core/test_faults.py), {@code java -cp ...
   * dev.uatu.faults.FaultPoints MODE}: {@code parse} reads UATU_FAULT values on stdin, one a
   * line, and prints for each its faults ({@code <point>[/<scope>]@<n>:<action>}, joined by
   * ",") or {@code error}; {@code hits <point>[/<scope>]...} reaches each point in turn under
   * this JVM's UATU_FAULT and prints {@code fired} (a FaultInjected) or {@code passed} for each.
   */
  public static void main(String[] args) throws IOException {
    if (args.length > 0 && args[0].equals("parse")) {
      BufferedReader in =
          new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      for (String line = in.readLine(); line != null; line = in.readLine()) {
        String shown;
        try {
          shown = parse(line).stream().map(Fault::toString).collect(Collectors.joining(","));
        } catch (IllegalArgumentException e) {
          shown = "error";
        }
        System.out.println(shown);
      }
      return;
    }
    if (args.length > 0 && args[0].equals("hits")) {
      for (int i = 1; i < args.length; i++) {
        int slash = args[i].indexOf('/');
        String point = slash < 0 ? args[i] : args[i].substring(0, slash);
        String scope = slash < 0 ? "" : args[i].substring(slash + 1);
        System.out.println(failure(point, scope) == null ? "passed" : "fired");
      }
      return;
    }
    System.err.println("usage: FaultPoints parse | hits <point>[/<scope>]...");
    System.exit(2);
  }
}
