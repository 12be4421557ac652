package dev.uatu.fs;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * Hadoop's checksummed local {@code AbstractFileSystem} ({@code fs.AbstractFileSystem.file.impl},
 * what a {@code FileContext} of {@code file:} paths uses: Spark's streaming checkpoints, Delta's
 * log) over {@link NioRawLocalFileSystem}, as Hadoop's {@code LocalFs} is over its raw one.
 *
 * <p>A rename that must not replace its destination is atomic here ({@link
 * Raw#renameInternal}): Delta commits a version by such a rename, and two applications that
 * write one table commit the same version at the same moment.
 */
public class NioLocalFs extends ChecksumFs {
  /** The constructor Hadoop calls (AbstractFileSystem.createFileSystem). */
  public NioLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(uri, conf));
  }

  /** Hadoop's {@code RawLocalFs}, whose constructors are not public, over the nio raw one. */
  static final class Raw extends DelegateToFileSystem {
    private final NioRawLocalFileSystem files;

    Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      this(uri, new NioRawLocalFileSystem(), conf);
    }

    private Raw(URI uri, NioRawLocalFileSystem files, Configuration conf)
        throws IOException, URISyntaxException {
      super(uri, files, conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
      this.files = files;
    }

    /**
     * A file's rename that must not replace {@code dst} is a hard link, then the unlink of
     * {@code src}: the link fails when {@code dst} exists, in one system call. Hadoop's default
     * looks for {@code dst} and then renames, which replaces a {@code dst} that appeared in
     * between: two processes committing the same Delta version both succeed, the later one's
     * file replacing the earlier one's commit, its checksum file left beside the other's data.
     * A folder, a replacing rename, or a file system without hard links goes Hadoop's way.
     */
    @Override
    public void renameInternal(Path src, Path dst, boolean overwrite) throws IOException {
      java.nio.file.Path from = files.pathToFile(src).toPath();
      if (overwrite || !Files.isRegularFile(from, LinkOption.NOFOLLOW_LINKS)) {
        super.renameInternal(src, dst, overwrite);
        return;
      }
      try {
        Files.createLink(files.pathToFile(dst).toPath(), from);
      } catch (java.nio.file.FileAlreadyExistsException e) {
        throw new FileAlreadyExistsException("Rename destination " + dst + " already exists.");
      } catch (NoSuchFileException e) {
        throw new FileNotFoundException("Rename: " + e.getFile() + " does not exist");
      } catch (UnsupportedOperationException | FileSystemException e) {
        super.renameInternal(src, dst, overwrite); // no hard links here (or not across mounts)
        return;
      }
      Files.delete(from);
    }

    @Override
    public int getUriDefaultPort() {
      return -1; // no port in a file: URI
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true; // as Hadoop's RawLocalFs: every local name is valid
    }
  }
}
