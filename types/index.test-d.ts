import { expectError, expectType } from 'tsd'
import type { LookupAddress } from 'node:dns'
import { createDnsCache, install, installed, uninstall, errors, type DnsCache, type DnsStats, type Installation } from '.'

const handle = install({ dns: { maxTtlMs: 60_000, servers: ['127.0.0.1:53'], hostsFile: null } })
expectType<Installation>(handle)
expectType<DnsCache | null>(handle.dns)
expectType<boolean>(uninstall())
expectType<Installation | null>(installed())
expectType<Installation>(install({ dns: false }))
expectError(install({ dns: { maxTTL: 5 } }))
expectError(install({ dns: { maxTtlMs: '5' } }))

const cache = createDnsCache({ minTtlMs: 0 })
expectType<DnsStats>(cache.stats())
cache.lookup('example.test', (err, address, family) => {
  expectType<NodeJS.ErrnoException | null>(err)
  expectType<string>(address)
  expectType<number>(family)
})
cache.lookup('example.test', { all: true }, (err, addresses) => {
  expectType<NodeJS.ErrnoException | null>(err)
  expectType<LookupAddress[]>(addresses)
})
expectType<Promise<LookupAddress>>(cache.lookupAsync('example.test'))
expectType<Promise<LookupAddress[]>>(cache.lookupAsync('example.test', { all: true }))

const code: string = new errors.ERR_IO_HYGIENE_CLOSED('batcher').code
expectType<string>(code)
