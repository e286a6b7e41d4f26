'use strict'

// dns-differential.test.js again, in a network namespace with loopback
// only: for glibc's AI_ADDRCONFIG that host has neither family, and its
// RFC 6724 sort finds no source address for any destination.
const { enterNamespace } = require('./helpers/in-namespace')

const HOSTS = '127.0.0.1 localhost\n::1 localhost\n'
const inside = enterNamespace(__filename, { hosts: HOSTS, search: ['a.test', 'b.test'], options: 'ndots:1 timeout:1 attempts:1', loOnly: true })
if (inside) require('./dns-differential.test.js')
