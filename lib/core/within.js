'use strict'

// Whether `promise` settles within `ms` (true) or not (false); a rejection
// before then is thrown. The timer is ref'd: a caller awaits it, and the
// process must not exit before it settles. What the promise rejects with
// after the deadline has nobody left to tell.
function within (promise, ms) {
  let timer
  const late = new Promise((resolve) => { timer = setTimeout(resolve, Math.max(0, ms), false) })
  promise.catch(() => {})
  return Promise.race([promise.then(() => true), late]).finally(() => clearTimeout(timer))
}

module.exports = { within }
