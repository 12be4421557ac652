package dev.uatu.audit;

import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.LongBuffer;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The files of the exact audits' keys, on any Hadoop file system the checkpoint lives on.
 *
 * <pre>
 * keysDir/p{partition}/log/{batch}                  the partition's watermark after the batch
 * keysDir/p{partition}/i{interval s}/w{start ms}/{batch}.keys   the window's new keys of the batch
 * keysDir/p{partition}/i{interval s}/w{start ms}/{batch}.all    every key of the window so far
 * </pre>
 *
 * A batch reads only files of earlier batches and writes only its own (each atomically: a
 * temporary file, then a rename), so a batch replayed after a crash reads what its first run
 * read and rewrites the same files. A key file is a 4-byte magic, an 8-byte count, then the keys
 * as 8-byte big-endian longs.
 */
final class KeyFiles {
  static final int MAGIC = 0x55414b31; // "UAK1"
  static final String KEYS = ".keys";
  static final String ALL = ".all";

  private KeyFiles() {}

  /**
   * The file system key files under {@code dir} are read and written with. For a local
   * checkpoint, the raw local one, whose new files {@link #create} makes through java.nio:
   * Hadoop's checksummed local file system writes a .crc beside every file, and both set a new
   * file's permissions by forking a {@code chmod} process when Hadoop's native library is
   * absent (as in Spark's distribution); a batch of thousands of partitions spent minutes in
   * those processes. Files written either way read the same.
   */
  static FileSystem fileSystem(Path dir, Configuration conf) throws IOException {
    FileSystem fs = dir.getFileSystem(conf);
    return fs instanceof LocalFileSystem local ? local.getRawFileSystem() : fs;
  }

  /**
   * A new file, replacing any, and the folders above it. On the raw local file system through
   * java.nio: Hadoop's sets a new file's or folder's permissions by forking {@code chmod}
   * whatever it is given (each fork a copy of the executor's address space).
   */
  private static OutputStream create(FileSystem fs, Path file) throws IOException {
    if (fs instanceof RawLocalFileSystem local) {
      java.nio.file.Path target = local.pathToFile(file).toPath();
      Files.createDirectories(target.getParent());
      return new BufferedOutputStream(Files.newOutputStream(target), 1 << 16);
    }
    return fs.create(file, true);
  }

  /** Makes {@code dir} and the folders above it (as {@link #create}, without forking). */
  static void mkdirs(FileSystem fs, Path dir) throws IOException {
    if (fs instanceof RawLocalFileSystem local) {
      Files.createDirectories(local.pathToFile(dir).toPath());
    } else {
      fs.mkdirs(dir);
    }
  }

  /** One file of a window: its batch and whether it holds every key so far. */
  record Version(long batch, boolean all, Path path) {}

  /** A window's files of batches before {@code before}, oldest first. */
  static List<Version> versions(FileSystem fs, Path windowDir, long before) throws IOException {
    List<Version> out = new ArrayList<>();
    FileStatus[] statuses;
    try {
      statuses = fs.listStatus(windowDir);
    } catch (FileNotFoundException e) {
      return out;
    }
    for (FileStatus status : statuses) {
      String name = status.getPath().getName();
      boolean all = name.endsWith(ALL);
      if (!all && !name.endsWith(KEYS)) {
        continue; // a temporary file of an interrupted write
      }
      String digits = name.substring(0, name.length() - (all ? ALL : KEYS).length());
      if (digits.isEmpty() || !digits.chars().allMatch(Character::isDigit)) {
        continue;
      }
      long batch = Long.parseLong(digits);
      if (batch < before) {
        out.add(new Version(batch, all, status.getPath()));
      }
    }
    out.sort((a, b) -> Long.compare(a.batch, b.batch));
    return out;
  }

  /** The files a reader of batch {@code before} needs: the newest .all and the .keys after it. */
  static List<Version> needed(List<Version> versions) {
    int from = 0;
    for (int i = 0; i < versions.size(); i++) {
      if (versions.get(i).all()) {
        from = i;
      }
    }
    return versions.subList(from, versions.size());
  }

  static void write(FileSystem fs, Path file, long[] keys, int count) throws IOException {
    Path tmp = new Path(file.getParent(), "." + file.getName() + ".tmp");
    ByteBuffer buffer = ByteBuffer.allocate(1 << 16);
    try (OutputStream out = create(fs, tmp)) {
      DataOutputStream header = new DataOutputStream(out);
      header.writeInt(MAGIC);
      header.writeLong(count);
      header.flush();
      for (int i = 0; i < count; i++) {
        if (!buffer.hasRemaining()) {
          out.write(buffer.array(), 0, buffer.position());
          buffer.clear();
        }
        buffer.putLong(keys[i]);
      }
      out.write(buffer.array(), 0, buffer.position());
    }
    rename(fs, tmp, file);
  }

  /** Adds the keys of {@code file} to {@code into}; returns how many it holds. */
  static long readInto(FileSystem fs, Path file, LongHashSet into) throws IOException {
    byte[] bytes;
    try (InputStream in = fs.open(file)) {
      bytes = in.readAllBytes();
    }
    DataInputStream header = new DataInputStream(new java.io.ByteArrayInputStream(bytes, 0, 12));
    if (bytes.length < 12 || header.readInt() != MAGIC) {
      throw new IOException(file + " is not a key file");
    }
    long count = header.readLong();
    if (bytes.length != 12 + 8 * count) {
      throw new IOException(file + ": " + bytes.length + " bytes for " + count + " keys");
    }
    LongBuffer keys = ByteBuffer.wrap(bytes, 12, bytes.length - 12).asLongBuffer();
    while (keys.hasRemaining()) {
      into.add(keys.get());
    }
    return count;
  }

  /** The newest batch before {@code before} with a log entry in {@code logDir}, or -1. */
  static long newestLog(FileSystem fs, Path logDir, long before) throws IOException {
    long newest = -1;
    for (long batch : logBatches(fs, logDir)) {
      if (batch < before) {
        newest = Math.max(newest, batch);
      }
    }
    return newest;
  }

  static List<Long> logBatches(FileSystem fs, Path logDir) throws IOException {
    List<Long> out = new ArrayList<>();
    FileStatus[] statuses;
    try {
      statuses = fs.listStatus(logDir);
    } catch (FileNotFoundException e) {
      return out;
    }
    for (FileStatus status : statuses) {
      String name = status.getPath().getName();
      if (!name.isEmpty() && name.chars().allMatch(Character::isDigit)) {
        out.add(Long.parseLong(name));
      }
    }
    Collections.sort(out);
    return out;
  }

  static long readLog(FileSystem fs, Path file) throws IOException {
    try (DataInputStream in = new DataInputStream(fs.open(file))) {
      if (in.readInt() != MAGIC) {
        throw new IOException(file + " is not a key log entry");
      }
      return in.readLong();
    }
  }

  static void writeLog(FileSystem fs, Path file, long watermarkMs) throws IOException {
    Path tmp = new Path(file.getParent(), "." + file.getName() + ".tmp");
    try (DataOutputStream out = new DataOutputStream(create(fs, tmp))) {
      out.writeInt(MAGIC);
      out.writeLong(watermarkMs);
    }
    rename(fs, tmp, file);
  }

  private static void rename(FileSystem fs, Path tmp, Path target) throws IOException {
    fs.delete(target, false);
    if (!fs.rename(tmp, target)) {
      throw new IOException("could not rename " + tmp + " to " + target);
    }
  }
}
