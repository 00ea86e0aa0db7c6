// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title DevMulticall
/// @notice Runs several calls in one transaction. Its aggregate3 has the
/// interface of Multicall3's, the batching contract deployed at the same
/// address on most EVM chains (Base among them): the devchain places it at
/// that address, so that a relayer batches its settlements the same way
/// there and on a real chain. Each call may be allowed to fail without
/// undoing the others.
contract DevMulticall {
    /// @notice One call: its target, whether it may fail, and its input.
    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    /// @notice What one call returned, and whether it succeeded.
    struct Result {
        bool success;
        bytes returnData;
    }

    /// @notice Runs calls in order. A call that fails reverts the whole
    /// transaction with its own revert data unless it allows failure.
    function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory returnData) {
        uint256 n = calls.length;
        returnData = new Result[](n);
        for (uint256 i = 0; i < n; i++) {
            Call3 calldata c = calls[i];
            (bool ok, bytes memory ret) = c.target.call(c.callData);
            if (!ok && !c.allowFailure) {
                assembly {
                    revert(add(ret, 32), mload(ret))
                }
            }
            returnData[i] = Result(ok, ret);
        }
    }
}
