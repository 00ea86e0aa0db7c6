package worker

// FollowLock is followLock, for the tests.
var FollowLock = followLock
