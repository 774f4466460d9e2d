package capacity

// ClosedIdleShare is closedIdleShare, for the tests outside the package.
const ClosedIdleShare = closedIdleShare
