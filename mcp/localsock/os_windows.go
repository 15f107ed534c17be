package localsock

import "io/fs"

// narrowUmask: Windows has no umask; a socket file takes its folder's ACL.
// The socket serves no one there anyway (PeerOf needs SO_PEERCRED).
func narrowUmask() (restore func()) { return func() {} }

// closeOnExec: Windows does not pass descriptors to children unless asked.
func closeOnExec(int) {}

// ownerOf: Windows file owners are SIDs, not uids; 0 reads as "root", so
// folderDoubt judges only the mode bits Go derives from the attributes.
func ownerOf(fs.FileInfo) uint32 { return 0 }
