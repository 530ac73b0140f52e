"""The durability oracle: what a crash state must hold, and the check of a mounted one.

Stdlib only; the host imports it and the guest runs it (``harness/guest/opgen.py`` drives
the model while the workload runs, ``checkstate.py`` calls ``verify``). The package:
``namespace`` (the model), ``ordering`` (rule 18), ``stamps`` (rule 20's times),
``marks`` (what each mark requires, the profiles' floors), ``rules`` (each rule's row and
check, a module per promise) and ``verify`` (the walk of a mounted state's requirements).

Each rule says what Linux promises and which filesystems this lab holds to it. The
oracle never requires more (soundness): a missed finding is possible, a false one is a
bug of ours.

Marks. After every fsync / fdatasync / directory fsync / sync *returns*, the workload
places mark ``crashlab:sync:<n>``. dm-log-writes logs a completed write only when a later
flush covers it, so a cut at a mark holds exactly what some flush or FUA had made
durable by then (the volatile-cache model), and nothing the workload did afterwards.

Rules, per mark n (``marks[i]`` in the oracle file):

1. Data (``files``): a file's content is durable once fsync, fdatasync or sync returned
   after its last write or truncate (POSIX fsync/fdatasync). Its *name* is durable after
   sync, after fsync of its parent directory once the entry exists, or after fsync of the
   file itself through that name -- POSIX does not promise the last one, but journaled
   ext3/ext4, xfs and btrfs all persist it; ``fsync_names = false`` (ext2, ext4 without a
   journal) keeps to POSIX. A name counts only when every ancestor directory's name is
   durable too. Checked: the file exists, its size, its sha256.
2. The interval: a state whose last mark is n may be cut anywhere before mark n+1, so a
   file *touched* in that interval (written, truncated, renamed from or over, linked,
   unlinked, through any of its names) is not required by ``files`` -- except:
3. Exactly at the mark (``exact``): a state cut right at mark n holds nothing logged
   after it, so every file durable at n is required as it was, touched later or not.
4. Appends keep their prefix (``prefixes``): a file only appended to after mark n still
   holds its first ``size`` bytes unchanged; an append writes past the old end (and
   rewrites the old last block with the same bytes), it never changes what was there.
5. Rename-over is atomic (``either``): rename(2) replaces the target in one step, so a
   durable target renamed over by a durable file holds the old or the new content --
   never neither, never a mix -- until the rename is made durable (then rule 1).
6. Durable removal (``absent``): a name unlinked or renamed away, and then made durable
   by fsync of its directory or sync, stays gone. Before that, a stale name may come back
   (an unlink is not durable until its directory is synced), so nothing is required.
7. Link counts (``nlink``): after a sync with no link, unlink or rename of the file
   since, the inode's link count is exactly its number of names (the inode was written
   whole by the sync). Otherwise nothing: a stale name may hold an extra link.
8. Extended attributes (``xattrs``, the ``user.`` namespace): a required file's
   attributes are exactly the model's once fsync (on the filesystems that keep rule 1's
   name promise: fsync commits the whole inode, its attributes included) or sync
   returned after their last change. fdatasync does not cover them: they are not
   needed to read the data.
9. Directories (``dirs``, ``absent``): a new directory is durable like a name (its
   parent fsync'd, or sync; never by its own fsync, which no rule promises); a removed
   or renamed-away directory like a removed name (rule 6). A directory renamed keeps
   its files: their names are durable again once the new name is.
10. A new file: its (empty) content is durable from the start where rule 1's promise
   is kept -- ext4, xfs and btrfs create the inode and its entry in one transaction --
   so a file created and made durable by its directory's fsync must exist, empty. Where
   it is not kept (ext2), a directory fsync writes the entry but not the new inode.
11. Moves that keep the content (``defrag``: e4defrag, EXT4_IOC_MOVE_EXT) change no
   file's bytes, so they touch nothing: a file durable before one stays required, as
   it was, at every state during and after it. The block exchange is journaled; a
   state that shows other bytes lost data a defragmenter promised not to touch.

13. Symbolic links (``symlink``): the target is the link's data, written with its inode
   in the transaction that makes the name; once the name is durable (rule 1's name rules:
   its directory's fsync or sync -- a link cannot be fsync'd through its name, open(2)
   follows it) the link must exist and read back its target (readlink), not what it
   points at.
14. Mode and owner (``mode``, ``owner``): a file's chmod / chown is durable once sync, or
   fsync of the file where rule 1's name promise is kept (fsync commits the whole
   inode), returned after it. fdatasync does not cover them (not needed to read the
   data, as rule 8). Times are rule 20's.
15. Held descriptors (``open``, ``tmpfile``; ``fsync_fd``, ``write_fd``): fsync through a
   descriptor is fsync of its inode (rule 1's data promise), whatever names it has now;
   it makes no name durable (it was fsync'd through none). Where rule 1's name promise is
   kept, fsync commits the whole inode, its link count included: an inode whose last
   name was removed is committed unlinked, so the names removed from it stay gone (an
   fsync'd unlinked-but-open file does not come back). A held directory's fsync is that
   directory's fsync while it exists; once removed, the same holds as for a file: its
   fsync commits it removed, and its name stays gone (fstests generic/792 expects it of
   ext4, xfs and btrfs). O_TMPFILE + linkat: a new inode, named at linkat (rule 10).
16. renameat2: RENAME_NOREPLACE is rename to a free name; RENAME_EXCHANGE swaps what two
   names refer to in one step, neither name durable until its directory is synced (a
   crash before shows the old pair, which no durable requirement forbids).
17. btrfs subvolumes are directories to the namespace (rule 9); a snapshot is a new
   directory holding new inodes with the source's contents as they were. Its name is
   durable like a new directory's; its files are required only after a sync (no rule
   of the kernel's says the snapshot ioctl makes them durable).

18. Ordered metadata (profile ``ordered-metadata``, chosen per run): a namespace op
   (create, link, unlink, rename, mkdir, rmdir, symlink) is durable once a file or
   directory that changed after it is fsync'd -- one journal commits in order, so the
   commit that makes the fsync'd inode's last change durable makes every earlier one
   durable too. ext4 (data=ordered or journal, no fast commit) and xfs work this way;
   btrfs's maintainers test against it (fstests generic/785: a directory's fsync keeps
   the new subdirectory and its entry). Not POSIX, and not the default.

19. Clones (``clone``: ioctl(FICLONE) into a new file; ioctl_ficlone(2), fstests'
   generic/ reflink tests): the new file holds the source's bytes as they were at the
   clone; they are durable like written data (fsync or fdatasync of the new file, or
   sync: rule 1) and its name like a new file's (rule 10); the source's bytes and
   requirements are unchanged (the extents are shared, not moved).

20. Times (``times`` of a file, ``dir_times``; ``clock`` and ``until`` of a mark): a
   recovered mtime or ctime is one the inode had between its last whole commit and the
   crash -- never older than what sync, or fsync where rule 1's name promise is kept,
   made durable (read off the filesystem right after that op returned: ``stamps.py``),
   never later than the clock when the state's interval closed. fdatasync commits no
   time (POSIX: data integrity only); utimes may set mtime back, freeing it from below.
   atime never.

21. Shutdown (``shutdown``, ``shutdown_logflush``, ``shutdown_nologflush``: ioctl
   FS_IOC_SHUTDOWN ends the workload): the default flag freezes first (as sync); the
   log flush makes every name, directory, removal and inode attribute durable but no
   data, so a file it named whose data nothing made durable must exist with any content
   (``named``, checked as rule 1's name); no log flush makes nothing more durable. The
   filesystem's promise, not POSIX's: the ``posix`` floor requires nothing of it.

22. A failed op (ENOSPC on a filled disk, ``fs.fill``; the op entry's ``failed``): it
   promised nothing and changed nothing durable. A namespace op or an attribute is left
   out of the model; after a failed write, truncate or fallocate the model takes the
   file's real bytes (``opgen.execute``), none durable; a failed persistence op places
   no mark.

23. Processes (the oracle's ``processes``; ``guest/procs.py``): ops of several
   processes, each in its own directory, recorded in the order they returned; a
   process's persistence ops promise only its own names, a drawn sync is its
   directory's fsync, and no cut is judged exact (a call in flight at a mark may be
   partly in it).

24. Two devices (``fs.devices = 2``: an external journal or log, or a mirror): the
   oracle is unchanged; the states are both devices' logs cut at one mark
   (``crashstate/checking.py``: ``SecondLog``), so each mark's requirement is read as for
   one device.

Profiles: ``posix`` (rules without 1's name promise), ``fsync-names`` (the journaled
filesystems' default) and ``ordered-metadata`` (and rule 18). A run's oracle says its
profile and, per mark, what each weaker one requires (``floors``); a failed check says
the weakest promise it broke (``promise``).

(Rule 12 is fio's, docs/verdicts.md and fioverify.py.)

After the final mark nothing changes: a state cut after ``crashlab:umount`` or at the end
of the log (``dm-log-writes-end``) requires what the final mark requires, exactly.
"""

from __future__ import annotations

from .marks import (
    AFTER_FINAL,
    FORMAT,
    MARK_PREFIX,
    PROFILES,
    Floor,
    Recorder,
    Tracker,
    floors,
    profile_of,
)
from .namespace import Inode, Model
from .ordering import Ordering
from .rules.data import file_digest
from .rules.metadata import user_xattrs
from .stamps import untimed
from .verify import UsageError, load_oracle, requirements, verify

__all__ = [
    "AFTER_FINAL", "FORMAT", "MARK_PREFIX", "PROFILES", "Floor", "Inode", "Model", "Ordering",
    "Recorder", "Tracker", "UsageError", "file_digest", "floors", "load_oracle", "profile_of",
    "requirements", "untimed", "user_xattrs", "verify",
]  # fmt: skip
