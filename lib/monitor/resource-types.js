'use strict'

// What process.getActiveResourcesInfo() reports, the one definition the
// monitor and the benchmarks share. It lists class names, not async_hooks
// types: active libuv requests (ConnectWrap, WriteWrap and SimpleWriteWrap,
// ShutdownWrap and SimpleShutdownWrap, SendWrap, GetAddrInfoReqWrap,
// GetNameInfoReqWrap, FSReqCallback, FSReqPromise, FileHandle's CloseReq),
// then ref'd handles (sockets, servers) and ref'd timers (Timeout, Immediate).
// Unref'd handles are not listed, and c-ares queries (dns.resolve*, Resolver)
// are not libuv requests: neither is ever counted.
const REQUEST = /(ReqWrap|Req|WriteWrap|ShutdownWrap|SendWrap|ConnectWrap)$|^FSReq/

function isRequest (name) {
  return REQUEST.test(name)
}

function activeRequests () {
  let n = 0
  for (const name of process.getActiveResourcesInfo()) if (isRequest(name)) n++
  return n
}

// The names Node reports (20 to 26), and other resource classes of Node's. A
// name near one of them (a letter or two off, or another case) is a typo
// whose condition could never fire; a name far from all of them may be a
// type of a newer Node, and is accepted.
const RESOURCE_TYPES = [
  'CloseReq', 'ConnectWrap', 'DirHandle', 'DNSChannel', 'ELDHistogram', 'FileHandle', 'FSEventWrap',
  'FSReqCallback', 'FSReqPromise', 'GetAddrInfoReqWrap', 'GetNameInfoReqWrap', 'HeapSnapshot', 'HTTPParser',
  'Http2Session', 'Http2Stream', 'Immediate', 'JSStream', 'MessagePort', 'PipeServerWrap',
  'PipeWrap', 'ProcessWrap', 'QueryWrap', 'SendWrap', 'ShutdownWrap', 'SigintWatchdog', 'SignalWrap', 'SimpleShutdownWrap',
  'SimpleWriteWrap', 'StatWatcher', 'StreamPipe', 'TCPServerWrap', 'TCPSocketWrap', 'TCPWrap', 'Timeout', 'TLSWrap',
  'TTYWrap', 'UDPWrap', 'Worker', 'WriteWrap', 'Zlib',
]

// async_hooks type names that getActiveResourcesInfo() never reports, and
// the name it reports instead: a condition on them could never fire.
const ASYNC_HOOKS_NAMES = {
  TCPConnectWrap: 'ConnectWrap',
  PipeConnectWrap: 'ConnectWrap',
  UDPSendWrap: 'SendWrap',
  FileHandleCloseReq: 'CloseReq',
}

module.exports = { isRequest, activeRequests, RESOURCE_TYPES, ASYNC_HOOKS_NAMES }
