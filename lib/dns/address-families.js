'use strict'

const os = require('node:os')

// Which address families this host has, as glibc's getaddrinfo decides
// AI_ADDRCONFIG (sysdeps/unix/sysv/linux/check_pf.c): by the addresses
// configured, whatever the interfaces' flags; 127.0.0.1 and ::1 count as
// neither, an IPv6 link-local address counts as IPv6. Read at most once per
// `checkIntervalMs`: an interface that gains or loses a family is seen
// within that time.
let cached = null
let checkedAt = -Infinity

function addressFamilies (checkIntervalMs = 1000) {
  const now = performance.now()
  if (cached !== null && now - checkedAt < checkIntervalMs) return cached
  let v4 = false
  let v6 = false
  let interfaces = {}
  // libuv fails to list interfaces only where the platform cannot (some
  // sandboxes); glibc then sees no address either.
  /* c8 ignore start */
  try {
    interfaces = os.networkInterfaces()
  } catch {}
  /* c8 ignore stop */
  for (const list of Object.values(interfaces)) {
    for (const a of list) {
      if (a.family === 'IPv4') {
        if (a.address !== '127.0.0.1') v4 = true
      } else if (a.address !== '::1') v6 = true
    }
  }
  cached = { v4, v6 }
  checkedAt = now
  return cached
}

module.exports = { addressFamilies }
