package redistest

import "strings"

// Slot is the Redis Cluster hash slot of key (CRC16 of the key, or of its
// {hash tag}, modulo 16384), computed here so a test can name the node
// that holds a key without asking the code under test.
func Slot(key string) int64 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int64(crc % 16384)
}
