'use strict'

// The partitions held back by the first `held` items of a batch, which are
// not sent: topic -> Set of partitions; `null` in it for an item never given
// a partition, which holds back its whole topic.
function mutedBy (items, held) {
  const muted = new Map()
  for (let i = 0; i < held; i++) {
    const item = items[i]
    item.slot = -1
    let partitions = muted.get(item.topic)
    if (partitions === undefined) muted.set(item.topic, (partitions = new Set()))
    partitions.add(item.partition)
  }
  return muted
}

module.exports = { mutedBy }
