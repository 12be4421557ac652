package dev.uatu.fs;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system with its two per-file shell-outs done through java.nio.
 *
 * <p>Without Hadoop's native library (Spark's distribution has none), {@link RawLocalFileSystem}
 * forks a {@code chmod} for every file and folder it creates with a permission and a {@code
 * readlink} for every link status it reads, which a rename through a {@code FileContext} does
 * twice. Every streaming checkpoint file and every Delta commit is written that way: several
 * process starts per micro-batch and query (docs/benchmarks.md, "Test suite"). This class
 * sets the same permission bits and answers the same status without a process. A sticky bit
 * (which java.nio cannot set) and a real symbolic link still go through Hadoop's own code.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {
      super.setPermission(p, permission);
      return;
    }
    Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission));
  }

  /**
   * The status of {@code f} itself: a symbolic link's through Hadoop's code, anything else's is
   * its file status (as Hadoop answers when {@code readlink} prints nothing).
   */
  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f);
  }

  /** The user, group and other bits of {@code permission} as java.nio's permission set. */
  static Set<PosixFilePermission> posix(FsPermission permission) {
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    add(
        bits,
        permission.getUserAction(),
        PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE,
        PosixFilePermission.OWNER_EXECUTE);
    add(
        bits,
        permission.getGroupAction(),
        PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE,
        PosixFilePermission.GROUP_EXECUTE);
    add(
        bits,
        permission.getOtherAction(),
        PosixFilePermission.OTHERS_READ,
        PosixFilePermission.OTHERS_WRITE,
        PosixFilePermission.OTHERS_EXECUTE);
    return bits;
  }

  private static void add(
      Set<PosixFilePermission> bits,
      FsAction action,
      PosixFilePermission read,
      PosixFilePermission write,
      PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      bits.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      bits.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      bits.add(execute);
    }
  }
}
