"""kio's response classes as unions over the versions of each API, for type annotations.

Owns one name per API (``JoinGroup``: kio's JoinGroupResponse of v0 | v1 | ... of every
version kio has), the answer side of ``request_types``: a handler says what it answers
(``-> response_types.JoinGroup``) and names the class of the request's version once,
``response_type: type[response_types.JoinGroup] = ctx.response_type``, so that
``framing.build(response_type, ...)`` is typed as the union and the type checker
refuses another API's response, or a field no version has where the response is read.

Imported for type checking only (``if TYPE_CHECKING:``), as ``request_types`` is: at run
time a version's classes are loaded when a request of that version first arrives
(``framing.codec_for``).

Does not own which versions are served (the router's table) nor the versions kio lacks
(``legacy_versions``, built at run time: a handler that answers one returns ``Any``).
"""

from __future__ import annotations

from typing import TypeAlias

from kio.schema.add_offsets_to_txn.v0.response import AddOffsetsToTxnResponse as _AddOffsetsToTxnV0
from kio.schema.add_offsets_to_txn.v1.response import AddOffsetsToTxnResponse as _AddOffsetsToTxnV1
from kio.schema.add_offsets_to_txn.v2.response import AddOffsetsToTxnResponse as _AddOffsetsToTxnV2
from kio.schema.add_offsets_to_txn.v3.response import AddOffsetsToTxnResponse as _AddOffsetsToTxnV3
from kio.schema.add_offsets_to_txn.v4.response import AddOffsetsToTxnResponse as _AddOffsetsToTxnV4
from kio.schema.add_partitions_to_txn.v0.response import (
    AddPartitionsToTxnResponse as _AddPartitionsToTxnV0,
)
from kio.schema.add_partitions_to_txn.v1.response import (
    AddPartitionsToTxnResponse as _AddPartitionsToTxnV1,
)
from kio.schema.add_partitions_to_txn.v2.response import (
    AddPartitionsToTxnResponse as _AddPartitionsToTxnV2,
)
from kio.schema.add_partitions_to_txn.v3.response import (
    AddPartitionsToTxnResponse as _AddPartitionsToTxnV3,
)
from kio.schema.add_partitions_to_txn.v4.response import (
    AddPartitionsToTxnResponse as _AddPartitionsToTxnV4,
)
from kio.schema.add_partitions_to_txn.v5.response import (
    AddPartitionsToTxnResponse as _AddPartitionsToTxnV5,
)
from kio.schema.allocate_producer_ids.v0.response import (
    AllocateProducerIdsResponse as _AllocateProducerIdsV0,
)
from kio.schema.alter_client_quotas.v0.response import (
    AlterClientQuotasResponse as _AlterClientQuotasV0,
)
from kio.schema.alter_client_quotas.v1.response import (
    AlterClientQuotasResponse as _AlterClientQuotasV1,
)
from kio.schema.alter_configs.v0.response import AlterConfigsResponse as _AlterConfigsV0
from kio.schema.alter_configs.v1.response import AlterConfigsResponse as _AlterConfigsV1
from kio.schema.alter_configs.v2.response import AlterConfigsResponse as _AlterConfigsV2
from kio.schema.alter_partition_reassignments.v0.response import (
    AlterPartitionReassignmentsResponse as _AlterPartitionReassignmentsV0,
)
from kio.schema.alter_partition_reassignments.v1.response import (
    AlterPartitionReassignmentsResponse as _AlterPartitionReassignmentsV1,
)
from kio.schema.alter_share_group_offsets.v0.response import (
    AlterShareGroupOffsetsResponse as _AlterShareGroupOffsetsV0,
)
from kio.schema.alter_user_scram_credentials.v0.response import (
    AlterUserScramCredentialsResponse as _AlterUserScramCredentialsV0,
)
from kio.schema.api_versions.v0.response import ApiVersionsResponse as _ApiVersionsV0
from kio.schema.api_versions.v1.response import ApiVersionsResponse as _ApiVersionsV1
from kio.schema.api_versions.v2.response import ApiVersionsResponse as _ApiVersionsV2
from kio.schema.api_versions.v3.response import ApiVersionsResponse as _ApiVersionsV3
from kio.schema.api_versions.v4.response import ApiVersionsResponse as _ApiVersionsV4
from kio.schema.begin_quorum_epoch.v0.response import (
    BeginQuorumEpochResponse as _BeginQuorumEpochV0,
)
from kio.schema.begin_quorum_epoch.v1.response import (
    BeginQuorumEpochResponse as _BeginQuorumEpochV1,
)
from kio.schema.broker_heartbeat.v0.response import BrokerHeartbeatResponse as _BrokerHeartbeatV0
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse as _BrokerHeartbeatV1
from kio.schema.broker_heartbeat.v2.response import BrokerHeartbeatResponse as _BrokerHeartbeatV2
from kio.schema.broker_registration.v0.response import (
    BrokerRegistrationResponse as _BrokerRegistrationV0,
)
from kio.schema.broker_registration.v1.response import (
    BrokerRegistrationResponse as _BrokerRegistrationV1,
)
from kio.schema.broker_registration.v2.response import (
    BrokerRegistrationResponse as _BrokerRegistrationV2,
)
from kio.schema.broker_registration.v3.response import (
    BrokerRegistrationResponse as _BrokerRegistrationV3,
)
from kio.schema.broker_registration.v4.response import (
    BrokerRegistrationResponse as _BrokerRegistrationV4,
)
from kio.schema.consumer_group_describe.v0.response import (
    ConsumerGroupDescribeResponse as _ConsumerGroupDescribeV0,
)
from kio.schema.consumer_group_describe.v1.response import (
    ConsumerGroupDescribeResponse as _ConsumerGroupDescribeV1,
)
from kio.schema.consumer_group_heartbeat.v0.response import (
    ConsumerGroupHeartbeatResponse as _ConsumerGroupHeartbeatV0,
)
from kio.schema.consumer_group_heartbeat.v1.response import (
    ConsumerGroupHeartbeatResponse as _ConsumerGroupHeartbeatV1,
)
from kio.schema.create_partitions.v0.response import CreatePartitionsResponse as _CreatePartitionsV0
from kio.schema.create_partitions.v1.response import CreatePartitionsResponse as _CreatePartitionsV1
from kio.schema.create_partitions.v2.response import CreatePartitionsResponse as _CreatePartitionsV2
from kio.schema.create_partitions.v3.response import CreatePartitionsResponse as _CreatePartitionsV3
from kio.schema.delete_groups.v0.response import DeleteGroupsResponse as _DeleteGroupsV0
from kio.schema.delete_groups.v1.response import DeleteGroupsResponse as _DeleteGroupsV1
from kio.schema.delete_groups.v2.response import DeleteGroupsResponse as _DeleteGroupsV2
from kio.schema.delete_records.v0.response import DeleteRecordsResponse as _DeleteRecordsV0
from kio.schema.delete_records.v1.response import DeleteRecordsResponse as _DeleteRecordsV1
from kio.schema.delete_records.v2.response import DeleteRecordsResponse as _DeleteRecordsV2
from kio.schema.delete_share_group_offsets.v0.response import (
    DeleteShareGroupOffsetsResponse as _DeleteShareGroupOffsetsV0,
)
from kio.schema.delete_share_group_state.v0.response import (
    DeleteShareGroupStateResponse as _DeleteShareGroupStateV0,
)
from kio.schema.describe_client_quotas.v0.response import (
    DescribeClientQuotasResponse as _DescribeClientQuotasV0,
)
from kio.schema.describe_client_quotas.v1.response import (
    DescribeClientQuotasResponse as _DescribeClientQuotasV1,
)
from kio.schema.describe_cluster.v0.response import DescribeClusterResponse as _DescribeClusterV0
from kio.schema.describe_cluster.v1.response import DescribeClusterResponse as _DescribeClusterV1
from kio.schema.describe_cluster.v2.response import DescribeClusterResponse as _DescribeClusterV2
from kio.schema.describe_groups.v0.response import DescribeGroupsResponse as _DescribeGroupsV0
from kio.schema.describe_groups.v1.response import DescribeGroupsResponse as _DescribeGroupsV1
from kio.schema.describe_groups.v2.response import DescribeGroupsResponse as _DescribeGroupsV2
from kio.schema.describe_groups.v3.response import DescribeGroupsResponse as _DescribeGroupsV3
from kio.schema.describe_groups.v4.response import DescribeGroupsResponse as _DescribeGroupsV4
from kio.schema.describe_groups.v5.response import DescribeGroupsResponse as _DescribeGroupsV5
from kio.schema.describe_groups.v6.response import DescribeGroupsResponse as _DescribeGroupsV6
from kio.schema.describe_producers.v0.response import (
    DescribeProducersResponse as _DescribeProducersV0,
)
from kio.schema.describe_quorum.v0.response import DescribeQuorumResponse as _DescribeQuorumV0
from kio.schema.describe_quorum.v1.response import DescribeQuorumResponse as _DescribeQuorumV1
from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse as _DescribeQuorumV2
from kio.schema.describe_share_group_offsets.v0.response import (
    DescribeShareGroupOffsetsResponse as _DescribeShareGroupOffsetsV0,
)
from kio.schema.describe_share_group_offsets.v1.response import (
    DescribeShareGroupOffsetsResponse as _DescribeShareGroupOffsetsV1,
)
from kio.schema.describe_transactions.v0.response import (
    DescribeTransactionsResponse as _DescribeTransactionsV0,
)
from kio.schema.describe_user_scram_credentials.v0.response import (
    DescribeUserScramCredentialsResponse as _DescribeUserScramCredentialsV0,
)
from kio.schema.elect_leaders.v0.response import ElectLeadersResponse as _ElectLeadersV0
from kio.schema.elect_leaders.v1.response import ElectLeadersResponse as _ElectLeadersV1
from kio.schema.elect_leaders.v2.response import ElectLeadersResponse as _ElectLeadersV2
from kio.schema.end_quorum_epoch.v0.response import EndQuorumEpochResponse as _EndQuorumEpochV0
from kio.schema.end_quorum_epoch.v1.response import EndQuorumEpochResponse as _EndQuorumEpochV1
from kio.schema.end_txn.v0.response import EndTxnResponse as _EndTxnV0
from kio.schema.end_txn.v1.response import EndTxnResponse as _EndTxnV1
from kio.schema.end_txn.v2.response import EndTxnResponse as _EndTxnV2
from kio.schema.end_txn.v3.response import EndTxnResponse as _EndTxnV3
from kio.schema.end_txn.v4.response import EndTxnResponse as _EndTxnV4
from kio.schema.end_txn.v5.response import EndTxnResponse as _EndTxnV5
from kio.schema.fetch.v4.response import FetchResponse as _FetchV4
from kio.schema.fetch.v5.response import FetchResponse as _FetchV5
from kio.schema.fetch.v6.response import FetchResponse as _FetchV6
from kio.schema.fetch.v7.response import FetchResponse as _FetchV7
from kio.schema.fetch.v8.response import FetchResponse as _FetchV8
from kio.schema.fetch.v9.response import FetchResponse as _FetchV9
from kio.schema.fetch.v10.response import FetchResponse as _FetchV10
from kio.schema.fetch.v11.response import FetchResponse as _FetchV11
from kio.schema.fetch.v12.response import FetchResponse as _FetchV12
from kio.schema.fetch.v13.response import FetchResponse as _FetchV13
from kio.schema.fetch.v14.response import FetchResponse as _FetchV14
from kio.schema.fetch.v15.response import FetchResponse as _FetchV15
from kio.schema.fetch.v16.response import FetchResponse as _FetchV16
from kio.schema.fetch.v17.response import FetchResponse as _FetchV17
from kio.schema.fetch.v18.response import FetchResponse as _FetchV18
from kio.schema.fetch_snapshot.v0.response import FetchSnapshotResponse as _FetchSnapshotV0
from kio.schema.fetch_snapshot.v1.response import FetchSnapshotResponse as _FetchSnapshotV1
from kio.schema.find_coordinator.v0.response import FindCoordinatorResponse as _FindCoordinatorV0
from kio.schema.find_coordinator.v1.response import FindCoordinatorResponse as _FindCoordinatorV1
from kio.schema.find_coordinator.v2.response import FindCoordinatorResponse as _FindCoordinatorV2
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse as _FindCoordinatorV3
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse as _FindCoordinatorV4
from kio.schema.find_coordinator.v5.response import FindCoordinatorResponse as _FindCoordinatorV5
from kio.schema.find_coordinator.v6.response import FindCoordinatorResponse as _FindCoordinatorV6
from kio.schema.heartbeat.v0.response import HeartbeatResponse as _HeartbeatV0
from kio.schema.heartbeat.v1.response import HeartbeatResponse as _HeartbeatV1
from kio.schema.heartbeat.v2.response import HeartbeatResponse as _HeartbeatV2
from kio.schema.heartbeat.v3.response import HeartbeatResponse as _HeartbeatV3
from kio.schema.heartbeat.v4.response import HeartbeatResponse as _HeartbeatV4
from kio.schema.incremental_alter_configs.v0.response import (
    IncrementalAlterConfigsResponse as _IncrementalAlterConfigsV0,
)
from kio.schema.incremental_alter_configs.v1.response import (
    IncrementalAlterConfigsResponse as _IncrementalAlterConfigsV1,
)
from kio.schema.init_producer_id.v0.response import InitProducerIdResponse as _InitProducerIdV0
from kio.schema.init_producer_id.v1.response import InitProducerIdResponse as _InitProducerIdV1
from kio.schema.init_producer_id.v2.response import InitProducerIdResponse as _InitProducerIdV2
from kio.schema.init_producer_id.v3.response import InitProducerIdResponse as _InitProducerIdV3
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse as _InitProducerIdV4
from kio.schema.init_producer_id.v5.response import InitProducerIdResponse as _InitProducerIdV5
from kio.schema.init_producer_id.v6.response import InitProducerIdResponse as _InitProducerIdV6
from kio.schema.initialize_share_group_state.v0.response import (
    InitializeShareGroupStateResponse as _InitializeShareGroupStateV0,
)
from kio.schema.join_group.v0.response import JoinGroupResponse as _JoinGroupV0
from kio.schema.join_group.v1.response import JoinGroupResponse as _JoinGroupV1
from kio.schema.join_group.v2.response import JoinGroupResponse as _JoinGroupV2
from kio.schema.join_group.v3.response import JoinGroupResponse as _JoinGroupV3
from kio.schema.join_group.v4.response import JoinGroupResponse as _JoinGroupV4
from kio.schema.join_group.v5.response import JoinGroupResponse as _JoinGroupV5
from kio.schema.join_group.v6.response import JoinGroupResponse as _JoinGroupV6
from kio.schema.join_group.v7.response import JoinGroupResponse as _JoinGroupV7
from kio.schema.join_group.v8.response import JoinGroupResponse as _JoinGroupV8
from kio.schema.join_group.v9.response import JoinGroupResponse as _JoinGroupV9
from kio.schema.leave_group.v0.response import LeaveGroupResponse as _LeaveGroupV0
from kio.schema.leave_group.v1.response import LeaveGroupResponse as _LeaveGroupV1
from kio.schema.leave_group.v2.response import LeaveGroupResponse as _LeaveGroupV2
from kio.schema.leave_group.v3.response import LeaveGroupResponse as _LeaveGroupV3
from kio.schema.leave_group.v4.response import LeaveGroupResponse as _LeaveGroupV4
from kio.schema.leave_group.v5.response import LeaveGroupResponse as _LeaveGroupV5
from kio.schema.list_groups.v0.response import ListGroupsResponse as _ListGroupsV0
from kio.schema.list_groups.v1.response import ListGroupsResponse as _ListGroupsV1
from kio.schema.list_groups.v2.response import ListGroupsResponse as _ListGroupsV2
from kio.schema.list_groups.v3.response import ListGroupsResponse as _ListGroupsV3
from kio.schema.list_groups.v4.response import ListGroupsResponse as _ListGroupsV4
from kio.schema.list_groups.v5.response import ListGroupsResponse as _ListGroupsV5
from kio.schema.list_partition_reassignments.v0.response import (
    ListPartitionReassignmentsResponse as _ListPartitionReassignmentsV0,
)
from kio.schema.list_transactions.v0.response import ListTransactionsResponse as _ListTransactionsV0
from kio.schema.list_transactions.v1.response import ListTransactionsResponse as _ListTransactionsV1
from kio.schema.list_transactions.v2.response import ListTransactionsResponse as _ListTransactionsV2
from kio.schema.metadata.v0.response import MetadataResponse as _MetadataV0
from kio.schema.metadata.v1.response import MetadataResponse as _MetadataV1
from kio.schema.metadata.v2.response import MetadataResponse as _MetadataV2
from kio.schema.metadata.v3.response import MetadataResponse as _MetadataV3
from kio.schema.metadata.v4.response import MetadataResponse as _MetadataV4
from kio.schema.metadata.v5.response import MetadataResponse as _MetadataV5
from kio.schema.metadata.v6.response import MetadataResponse as _MetadataV6
from kio.schema.metadata.v7.response import MetadataResponse as _MetadataV7
from kio.schema.metadata.v8.response import MetadataResponse as _MetadataV8
from kio.schema.metadata.v9.response import MetadataResponse as _MetadataV9
from kio.schema.metadata.v10.response import MetadataResponse as _MetadataV10
from kio.schema.metadata.v11.response import MetadataResponse as _MetadataV11
from kio.schema.metadata.v12.response import MetadataResponse as _MetadataV12
from kio.schema.metadata.v13.response import MetadataResponse as _MetadataV13
from kio.schema.offset_delete.v0.response import OffsetDeleteResponse as _OffsetDeleteV0
from kio.schema.read_share_group_state.v0.response import (
    ReadShareGroupStateResponse as _ReadShareGroupStateV0,
)
from kio.schema.read_share_group_state_summary.v0.response import (
    ReadShareGroupStateSummaryResponse as _ReadShareGroupStateSummaryV0,
)
from kio.schema.read_share_group_state_summary.v1.response import (
    ReadShareGroupStateSummaryResponse as _ReadShareGroupStateSummaryV1,
)
from kio.schema.sasl_authenticate.v0.response import SaslAuthenticateResponse as _SaslAuthenticateV0
from kio.schema.sasl_authenticate.v1.response import SaslAuthenticateResponse as _SaslAuthenticateV1
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse as _SaslAuthenticateV2
from kio.schema.sasl_handshake.v0.response import SaslHandshakeResponse as _SaslHandshakeV0
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse as _SaslHandshakeV1
from kio.schema.share_acknowledge.v1.response import ShareAcknowledgeResponse as _ShareAcknowledgeV1
from kio.schema.share_acknowledge.v2.response import ShareAcknowledgeResponse as _ShareAcknowledgeV2
from kio.schema.share_fetch.v1.response import ShareFetchResponse as _ShareFetchV1
from kio.schema.share_fetch.v2.response import ShareFetchResponse as _ShareFetchV2
from kio.schema.share_group_describe.v1.response import (
    ShareGroupDescribeResponse as _ShareGroupDescribeV1,
)
from kio.schema.share_group_heartbeat.v1.response import (
    ShareGroupHeartbeatResponse as _ShareGroupHeartbeatV1,
)
from kio.schema.sync_group.v0.response import SyncGroupResponse as _SyncGroupV0
from kio.schema.sync_group.v1.response import SyncGroupResponse as _SyncGroupV1
from kio.schema.sync_group.v2.response import SyncGroupResponse as _SyncGroupV2
from kio.schema.sync_group.v3.response import SyncGroupResponse as _SyncGroupV3
from kio.schema.sync_group.v4.response import SyncGroupResponse as _SyncGroupV4
from kio.schema.sync_group.v5.response import SyncGroupResponse as _SyncGroupV5
from kio.schema.txn_offset_commit.v0.response import TxnOffsetCommitResponse as _TxnOffsetCommitV0
from kio.schema.txn_offset_commit.v1.response import TxnOffsetCommitResponse as _TxnOffsetCommitV1
from kio.schema.txn_offset_commit.v2.response import TxnOffsetCommitResponse as _TxnOffsetCommitV2
from kio.schema.txn_offset_commit.v3.response import TxnOffsetCommitResponse as _TxnOffsetCommitV3
from kio.schema.txn_offset_commit.v4.response import TxnOffsetCommitResponse as _TxnOffsetCommitV4
from kio.schema.txn_offset_commit.v5.response import TxnOffsetCommitResponse as _TxnOffsetCommitV5
from kio.schema.unregister_broker.v0.response import UnregisterBrokerResponse as _UnregisterBrokerV0
from kio.schema.update_features.v0.response import UpdateFeaturesResponse as _UpdateFeaturesV0
from kio.schema.update_features.v1.response import UpdateFeaturesResponse as _UpdateFeaturesV1
from kio.schema.update_features.v2.response import UpdateFeaturesResponse as _UpdateFeaturesV2
from kio.schema.vote.v0.response import VoteResponse as _VoteV0
from kio.schema.vote.v1.response import VoteResponse as _VoteV1
from kio.schema.vote.v2.response import VoteResponse as _VoteV2
from kio.schema.write_share_group_state.v0.response import (
    WriteShareGroupStateResponse as _WriteShareGroupStateV0,
)
from kio.schema.write_share_group_state.v1.response import (
    WriteShareGroupStateResponse as _WriteShareGroupStateV1,
)

# key 25, v0-4
AddOffsetsToTxn: TypeAlias = (
    _AddOffsetsToTxnV0
    | _AddOffsetsToTxnV1
    | _AddOffsetsToTxnV2
    | _AddOffsetsToTxnV3
    | _AddOffsetsToTxnV4
)

# key 24, v0-5
AddPartitionsToTxn: TypeAlias = (
    _AddPartitionsToTxnV0
    | _AddPartitionsToTxnV1
    | _AddPartitionsToTxnV2
    | _AddPartitionsToTxnV3
    | _AddPartitionsToTxnV4
    | _AddPartitionsToTxnV5
)

# key 67, v0-0
AllocateProducerIds: TypeAlias = _AllocateProducerIdsV0

# key 49, v0-1
AlterClientQuotas: TypeAlias = _AlterClientQuotasV0 | _AlterClientQuotasV1

# key 33, v0-2
AlterConfigs: TypeAlias = _AlterConfigsV0 | _AlterConfigsV1 | _AlterConfigsV2

# key 45, v0-1
AlterPartitionReassignments: TypeAlias = (
    _AlterPartitionReassignmentsV0 | _AlterPartitionReassignmentsV1
)

# key 91, v0-0
AlterShareGroupOffsets: TypeAlias = _AlterShareGroupOffsetsV0

# key 51, v0-0
AlterUserScramCredentials: TypeAlias = _AlterUserScramCredentialsV0

# key 18, v0-4
ApiVersions: TypeAlias = (
    _ApiVersionsV0 | _ApiVersionsV1 | _ApiVersionsV2 | _ApiVersionsV3 | _ApiVersionsV4
)

# key 53, v0-1
BeginQuorumEpoch: TypeAlias = _BeginQuorumEpochV0 | _BeginQuorumEpochV1

# key 63, v0-2
BrokerHeartbeat: TypeAlias = _BrokerHeartbeatV0 | _BrokerHeartbeatV1 | _BrokerHeartbeatV2

# key 62, v0-4
BrokerRegistration: TypeAlias = (
    _BrokerRegistrationV0
    | _BrokerRegistrationV1
    | _BrokerRegistrationV2
    | _BrokerRegistrationV3
    | _BrokerRegistrationV4
)

# key 69, v0-1
ConsumerGroupDescribe: TypeAlias = _ConsumerGroupDescribeV0 | _ConsumerGroupDescribeV1

# key 68, v0-1
ConsumerGroupHeartbeat: TypeAlias = _ConsumerGroupHeartbeatV0 | _ConsumerGroupHeartbeatV1

# key 37, v0-3
CreatePartitions: TypeAlias = (
    _CreatePartitionsV0 | _CreatePartitionsV1 | _CreatePartitionsV2 | _CreatePartitionsV3
)

# key 42, v0-2
DeleteGroups: TypeAlias = _DeleteGroupsV0 | _DeleteGroupsV1 | _DeleteGroupsV2

# key 21, v0-2
DeleteRecords: TypeAlias = _DeleteRecordsV0 | _DeleteRecordsV1 | _DeleteRecordsV2

# key 92, v0-0
DeleteShareGroupOffsets: TypeAlias = _DeleteShareGroupOffsetsV0

# key 86, v0-0
DeleteShareGroupState: TypeAlias = _DeleteShareGroupStateV0

# key 48, v0-1
DescribeClientQuotas: TypeAlias = _DescribeClientQuotasV0 | _DescribeClientQuotasV1

# key 60, v0-2
DescribeCluster: TypeAlias = _DescribeClusterV0 | _DescribeClusterV1 | _DescribeClusterV2

# key 15, v0-6
DescribeGroups: TypeAlias = (
    _DescribeGroupsV0
    | _DescribeGroupsV1
    | _DescribeGroupsV2
    | _DescribeGroupsV3
    | _DescribeGroupsV4
    | _DescribeGroupsV5
    | _DescribeGroupsV6
)

# key 61, v0-0
DescribeProducers: TypeAlias = _DescribeProducersV0

# key 55, v0-2
DescribeQuorum: TypeAlias = _DescribeQuorumV0 | _DescribeQuorumV1 | _DescribeQuorumV2

# key 90, v0-1
DescribeShareGroupOffsets: TypeAlias = _DescribeShareGroupOffsetsV0 | _DescribeShareGroupOffsetsV1

# key 65, v0-0
DescribeTransactions: TypeAlias = _DescribeTransactionsV0

# key 50, v0-0
DescribeUserScramCredentials: TypeAlias = _DescribeUserScramCredentialsV0

# key 43, v0-2
ElectLeaders: TypeAlias = _ElectLeadersV0 | _ElectLeadersV1 | _ElectLeadersV2

# key 54, v0-1
EndQuorumEpoch: TypeAlias = _EndQuorumEpochV0 | _EndQuorumEpochV1

# key 26, v0-5
EndTxn: TypeAlias = _EndTxnV0 | _EndTxnV1 | _EndTxnV2 | _EndTxnV3 | _EndTxnV4 | _EndTxnV5

# key 1, v4-18 (v0-3 are built at run time: the broker's Fetch handler answers Any; the
# controller's fetch of the metadata log, v12-17, answers these)
Fetch: TypeAlias = (
    _FetchV4
    | _FetchV5
    | _FetchV6
    | _FetchV7
    | _FetchV8
    | _FetchV9
    | _FetchV10
    | _FetchV11
    | _FetchV12
    | _FetchV13
    | _FetchV14
    | _FetchV15
    | _FetchV16
    | _FetchV17
    | _FetchV18
)

# key 59, v0-1
FetchSnapshot: TypeAlias = _FetchSnapshotV0 | _FetchSnapshotV1

# key 10, v0-6
FindCoordinator: TypeAlias = (
    _FindCoordinatorV0
    | _FindCoordinatorV1
    | _FindCoordinatorV2
    | _FindCoordinatorV3
    | _FindCoordinatorV4
    | _FindCoordinatorV5
    | _FindCoordinatorV6
)

# key 12, v0-4
Heartbeat: TypeAlias = _HeartbeatV0 | _HeartbeatV1 | _HeartbeatV2 | _HeartbeatV3 | _HeartbeatV4

# key 44, v0-1
IncrementalAlterConfigs: TypeAlias = _IncrementalAlterConfigsV0 | _IncrementalAlterConfigsV1

# key 22, v0-6
InitProducerId: TypeAlias = (
    _InitProducerIdV0
    | _InitProducerIdV1
    | _InitProducerIdV2
    | _InitProducerIdV3
    | _InitProducerIdV4
    | _InitProducerIdV5
    | _InitProducerIdV6
)

# key 83, v0-0
InitializeShareGroupState: TypeAlias = _InitializeShareGroupStateV0

# key 11, v0-9
JoinGroup: TypeAlias = (
    _JoinGroupV0
    | _JoinGroupV1
    | _JoinGroupV2
    | _JoinGroupV3
    | _JoinGroupV4
    | _JoinGroupV5
    | _JoinGroupV6
    | _JoinGroupV7
    | _JoinGroupV8
    | _JoinGroupV9
)

# key 13, v0-5
LeaveGroup: TypeAlias = (
    _LeaveGroupV0 | _LeaveGroupV1 | _LeaveGroupV2 | _LeaveGroupV3 | _LeaveGroupV4 | _LeaveGroupV5
)

# key 16, v0-5
ListGroups: TypeAlias = (
    _ListGroupsV0 | _ListGroupsV1 | _ListGroupsV2 | _ListGroupsV3 | _ListGroupsV4 | _ListGroupsV5
)

# key 46, v0-0
ListPartitionReassignments: TypeAlias = _ListPartitionReassignmentsV0

# key 66, v0-2
ListTransactions: TypeAlias = _ListTransactionsV0 | _ListTransactionsV1 | _ListTransactionsV2

# key 3, v0-13
Metadata: TypeAlias = (
    _MetadataV0
    | _MetadataV1
    | _MetadataV2
    | _MetadataV3
    | _MetadataV4
    | _MetadataV5
    | _MetadataV6
    | _MetadataV7
    | _MetadataV8
    | _MetadataV9
    | _MetadataV10
    | _MetadataV11
    | _MetadataV12
    | _MetadataV13
)

# key 47, v0-0
OffsetDelete: TypeAlias = _OffsetDeleteV0

# key 84, v0-0
ReadShareGroupState: TypeAlias = _ReadShareGroupStateV0

# key 87, v0-1
ReadShareGroupStateSummary: TypeAlias = (
    _ReadShareGroupStateSummaryV0 | _ReadShareGroupStateSummaryV1
)

# key 36, v0-2
SaslAuthenticate: TypeAlias = _SaslAuthenticateV0 | _SaslAuthenticateV1 | _SaslAuthenticateV2

# key 17, v0-1
SaslHandshake: TypeAlias = _SaslHandshakeV0 | _SaslHandshakeV1

# key 79, v1-2
ShareAcknowledge: TypeAlias = _ShareAcknowledgeV1 | _ShareAcknowledgeV2

# key 78, v1-2
ShareFetch: TypeAlias = _ShareFetchV1 | _ShareFetchV2

# key 77, v1-1
ShareGroupDescribe: TypeAlias = _ShareGroupDescribeV1

# key 76, v1-1
ShareGroupHeartbeat: TypeAlias = _ShareGroupHeartbeatV1

# key 14, v0-5
SyncGroup: TypeAlias = (
    _SyncGroupV0 | _SyncGroupV1 | _SyncGroupV2 | _SyncGroupV3 | _SyncGroupV4 | _SyncGroupV5
)

# key 28, v0-5
TxnOffsetCommit: TypeAlias = (
    _TxnOffsetCommitV0
    | _TxnOffsetCommitV1
    | _TxnOffsetCommitV2
    | _TxnOffsetCommitV3
    | _TxnOffsetCommitV4
    | _TxnOffsetCommitV5
)

# key 64, v0-0
UnregisterBroker: TypeAlias = _UnregisterBrokerV0

# key 57, v0-2
UpdateFeatures: TypeAlias = _UpdateFeaturesV0 | _UpdateFeaturesV1 | _UpdateFeaturesV2

# key 52, v0-2
Vote: TypeAlias = _VoteV0 | _VoteV1 | _VoteV2

# key 85, v0-1
WriteShareGroupState: TypeAlias = _WriteShareGroupStateV0 | _WriteShareGroupStateV1
